"""Test equipment: processes and proxies the tests, the drill and the soak run against; product
code never imports it."""
