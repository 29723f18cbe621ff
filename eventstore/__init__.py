"""The write side: events, their codec, ids, errors and the LMDB log."""
