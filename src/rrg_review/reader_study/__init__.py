"""Controlled reader studies (issue #20): a study is data (design file, arms, blinding, sessions
with washout, a seeded balanced allocation) and its analysis (a long-format readings table, a
linear mixed-effects model with crossed reader and case effects, its JSON/HTML/CSV results).

The layer sits above `metrics` (an analysis may score final reports and edit rates) and below
`db` (the database stores a study's design and readings; the logic here needs no database)."""
