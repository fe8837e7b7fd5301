"""Algorithm implementations; importing this package registers every one of them."""

from suite.algorithms import ppo  # noqa: F401
