"""Fixtures of the agent-facing tests (defined in agent_helpers.py)."""

from agents.agent_helpers import project, run_ckpt, state_home

__all__ = ["project", "run_ckpt", "state_home"]
