"""The alerts: the heuristics catalogue, the rules generated from it, backtest and backfill."""
