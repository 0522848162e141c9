"""``loaderdoc tune``: DataLoader settings measured on the user's real job (trials, windows, the search)."""
