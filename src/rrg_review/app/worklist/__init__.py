"""The worklist: each reader's paged, searchable list of studies and their progress, and
its panel."""
