"""Local emulator of Pixeltable Cloud, its public agent API and its identity provider."""

__version__ = "0.1.0"
