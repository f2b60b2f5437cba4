"""Model clients: one interface (`ChatClient`) for APIs, local models and Python policies."""

from rlvr.clients.base import ChatClient
from rlvr.clients.policy import Policy

__all__ = ["ChatClient", "Policy"]
