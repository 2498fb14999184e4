"""Readers and their sign-in: accounts, passwords, sessions, the login throttle, and the audit log
of who did what."""
