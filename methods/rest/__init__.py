"""REST: retrieval proposer and its suffix-array datastore."""
