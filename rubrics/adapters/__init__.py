"""Rubrics exported to trainers and frameworks (Verifiers; TRL/veRL to come)."""
