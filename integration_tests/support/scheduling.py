"""How the suite's modules are handed to the xdist workers (pyproject.toml's addopts load
this plugin): a module at a time, as `--dist loadfile` does, except that the modules of one
group go to one worker together, so that what they share is started once in the run: one
3-node Apache Kafka cluster for the cluster lanes, one network lab and its cluster for the
partition lanes (integration_tests/conftest.py's session fixtures).
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

#: module path -> the group it runs in.
GROUPS = {
    "integration_tests/operations/test_kafka_cluster.py": "the 3-node cluster",
    "integration_tests/operations/test_cluster_faults.py": "the 3-node cluster",
    "integration_tests/operations/test_netns.py": "the network lab",
    "integration_tests/operations/test_network_partitions.py": "the network lab",
}


class ModuleGroups(LoadFileScheduling):
    """`--dist loadfile`, with the modules of a group in one unit of work."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return GROUPS.get(module, module)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") == "loadfile":
        return ModuleGroups(config, log)
    return None
