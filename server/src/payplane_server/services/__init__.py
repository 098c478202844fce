"""Use cases: each takes the AppContext (unit of work, clock, secrets), calls the domain and
records the result."""
