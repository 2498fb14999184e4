"""Storage: the SQLAlchemy schema, engine/session set-up and the queries everyone uses."""
