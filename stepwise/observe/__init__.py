"""Observe: what runs where and what happened, read from the state store only."""
