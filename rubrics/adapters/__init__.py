"""Rubrics exported to trainers and frameworks: Verifiers, TRL, veRL (the HTTP server is rubrics/server/app.py)."""
