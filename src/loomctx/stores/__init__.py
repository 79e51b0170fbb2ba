"""Storage backends behind one batch contract: SQLite embedded (default), PostgreSQL later."""
