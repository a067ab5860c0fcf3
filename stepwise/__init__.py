"""stepwise: upgrade running multi-node clouds without breaking them."""

__version__ = "0.1.0"
