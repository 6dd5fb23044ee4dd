"""Result objects returned by the core steps."""
