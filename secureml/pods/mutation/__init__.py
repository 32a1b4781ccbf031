"""What the platform adds to a secure step at admission, as data, and the same data applied offline."""
