"""What the front ends need of a Ray cluster: the access granted to an address, and connecting to it."""
