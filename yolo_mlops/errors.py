"""Errors a user can fix. Kept free of heavy imports: the CLI catches them before it imports anything else."""


class ConfigError(ValueError):
    """Bad input the user can fix; the CLI prints it as one line."""
