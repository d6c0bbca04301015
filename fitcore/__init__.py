"""fitcore: decides whether DRA gangs fit existing nodes and node shapes."""
