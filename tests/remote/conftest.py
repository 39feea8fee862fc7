"""Fixtures of the remote suite: the real SeaweedFS of tests/seaweed.py (a session server, a
bucket per test, a server of a test's own to kill and restart). Other folders import the same
fixtures from `seaweed` directly (tests/ is on pytest's `pythonpath`)."""

from __future__ import annotations

from seaweed import s3_bucket, s3_env, seaweed, seaweed_own

__all__ = ["s3_bucket", "s3_env", "seaweed", "seaweed_own"]
