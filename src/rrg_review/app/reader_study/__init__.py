"""Controlled reader studies in the app (issue #20): creating a study from its design file
against the database, listing and showing studies (the arm key for admins only) and their
status, sessions and washout; the readers' worklist of a study."""
