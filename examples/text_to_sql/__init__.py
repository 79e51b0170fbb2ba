"""A text-to-SQL agent over a realistic shop database (seed 001), runnable as
``python examples/text_to_sql``: see `__main__.py`."""
