"""Bringing studies in: importing folders and datasets into the database, and the catalog of what
is there."""
