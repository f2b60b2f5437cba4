"""Tic-tac-toe environment for rlvr: the model plays X against a seeded minimax opponent."""
