"""SSIJ: the contract and what only it promises (read plan, page cache, memory, 1:K, ranges)."""

from contract import JoinContract


class TestSsij(JoinContract):
    algorithm = "ssij"
