"""Sync trainer call sites run rubrics on the process's persistent reward loop (see `rubrics.aio`)."""

from rubrics.aio import run_sync

__all__ = ["run_sync"]
