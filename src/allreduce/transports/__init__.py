"""Transports: the implementations of :class:`allreduce.comm.Communicator`."""
