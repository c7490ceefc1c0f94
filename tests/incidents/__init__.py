"""The incident corpus: replays of both seeds' incidents and of quiet days, and the scorecard over them."""
