"""Upgrades and crashes: the smoke gate, the change list between starts, the crash classifier."""
