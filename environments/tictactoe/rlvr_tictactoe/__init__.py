"""Tic-tac-toe environment for rlvr: the model plays X against a seeded minimax opponent."""

from rlvr_tictactoe.env import GameState, TicTacToeEnv, load_environment

__all__ = ["GameState", "TicTacToeEnv", "load_environment"]
