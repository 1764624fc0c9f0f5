"""`make test`'s spread over xdist workers (tests/testbed/suite.py): the tests that must
share a worker do, whatever the marks say."""

from __future__ import annotations

from testbed import suite


def test_the_real_node_and_spark_tests_each_share_one_worker() -> None:
    realnode = {
        "tests/realnode/test_quickstart.py::test_the_quickstart_manifests_process_records",
        "tests/realnode/test_spark.py::test_spark_example_counts_each_event[x]",
    }
    spark = {
        "tests/spark/test_bronze_job.py::test_bronze_job_counts_every_event_once[local]",
        "tests/e2e/test_cdc.py::test_the_delta_mirror_equals_the_table_across_a_worker_kill",
        "tests/e2e/test_spark_pods.py::test_spark_in_the_worker_counts_each_event_once",
    }
    cluster = {
        "tests/spark/test_spark_cluster.py::test_pods_driving_the_cluster_share_its_cores",
        "tests/e2e/test_spark_cluster_pods.py::test_thin_workers_write_delta_on_a_spark_cluster_once",
    }
    assert {suite.group(nodeid) for nodeid in realnode} == {"realnode"}
    assert {suite.group(nodeid) for nodeid in spark} == {"spark"}
    assert {suite.group(nodeid) for nodeid in cluster} == {"spark-cluster"}


def test_an_integration_files_tests_share_one_worker_and_other_tests_spread() -> None:
    first = "tests/integration/test_cli.py::test_a"
    second = "tests/integration/test_cli.py::test_b[1]"
    assert suite.group(first) == suite.group(second) == "tests/integration/test_cli.py"
    assert suite.group("tests/integration/test_dist.py::test_a") != suite.group(first)
    one, other = "tests/e2e/test_reset.py::test_a", "tests/e2e/test_reset.py::test_b"
    assert suite.group(one) == one
    assert suite.group(other) == other
