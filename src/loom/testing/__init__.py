"""Public test doubles and conformance suites."""
