"""Forensics: typed views over the stored events, and what the analyst's commands (spyglass/cli/) ask of them.

`views` is the one table of views (docs/forensics.md is generated from it), `run` the one place
a forensic query leaves for the store, `reports/*.sql` the canned reports.
"""
