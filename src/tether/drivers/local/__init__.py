"""The local driver: a run driven in this process, on asyncio (``Agent``, ``Driver``, conversations, streams)."""
