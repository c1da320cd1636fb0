"""The LLM side of a chat turn: the queue of turns into the server, its client and token counter."""
