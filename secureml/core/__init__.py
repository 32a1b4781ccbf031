"""Values and names every layer shares: errors, violations, quantities, image references, the contract."""
