"""Helpers shared by more than one test folder; a folder's own helpers stay in that folder."""
