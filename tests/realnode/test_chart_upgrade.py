"""install → upgrade from the previous chart on the real node, with records flowing: the
previous chart (testbed.charts: 0.1.0 from the repository's history, its CRD in crds/)
installed with our operator image, the clickstream example consuming from the emulator;
then the upgrade docs/upgrades.md gives (the CRD adopted, `helm upgrade
--reset-then-reuse-values --wait`) while records keep coming. The operator's rollout
finishes, the CRD takes a field added since, the StreamConsumer is the same object, and
every record is processed once, in order.

This test installs the cluster's CRD from the previous chart, so it runs before the
README's install of this tier (files run in name order; it says so if the CRD is already
there), and removes all it installed, CRD included, when it ends.

Our images are built from the working tree: the operator image is the new one on both
sides, so this shows the chart's upgrade (objects, CRD, rollout), not an upgrade of the
operator's code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from realnode.deliveries import judge
from realnode.flow import EventFlow
from realnode.user import NodeUser
from testbed.charts import (
    CHART,
    UPGRADE_VALUES_FLAG,
    adopt_crd,
    documented,
    previous_chart,
)
from testbed.userpath import (
    OPERATOR,
    RELEASE_NAMESPACE,
)

from .own_release import RELEASE, OwnRelease

pytestmark = [pytest.mark.realnode, pytest.mark.timeout(2400)]


def test_the_previous_chart_upgrades_with_records_flowing(
    user_before_install: NodeUser, own_release: OwnRelease, tmp_path: Path
) -> None:
    user, release = user_before_install, own_release
    cluster, kubectl, emulator, consumer_ns = user

    repository, tag = cluster.images["operator"].rsplit(":", 1)
    host = str(urlsplit(emulator.endpoint_url).hostname)
    stream = user.new_stream(4, prefix="upgrade")
    flow = EventFlow(cluster, kubectl, emulator, stream, consumer_ns)

    def get(*args: str) -> Any:
        return json.loads(kubectl("get", *args, "-o", "json"))

    try:
        release.install(
            previous_chart(tmp_path / "previous"), host,
            *("--set", f"image.repository={repository}", "--set", f"image.tag={tag}"),
        )  # fmt: skip
        manifest = flow.example(cluster.images["clickstream"])
        flow.apply_ready(manifest)
        uid = get("-n", consumer_ns, "streamconsumer/clickstream")["metadata"]["uid"]
        flow.produce(400)
        flow.wait_all_processed("the first events processed")
        before = get("-n", RELEASE_NAMESPACE, f"deployment/{OPERATOR}")

        # The upgrade, as docs/upgrades.md gives it, while records keep coming.
        for command in adopt_crd(RELEASE, RELEASE_NAMESPACE):
            assert documented(command), f"docs/upgrades.md no longer says: kubectl {command}"
            kubectl(*command)
        flow.produce(200)
        release.helm(
            "upgrade", RELEASE, CHART, "-n", RELEASE_NAMESPACE, UPGRADE_VALUES_FLAG,
            "--wait", "--timeout", "5m",
        )  # fmt: skip
        flow.produce(200)
        kubectl(
            "-n", RELEASE_NAMESPACE, "rollout", "status", f"deployment/{OPERATOR}",
            "--timeout=180s",
        )  # fmt: skip
        flow.produce(200)
        flow.wait_all_processed("the events after the upgrade")

        after = get("-n", RELEASE_NAMESPACE, f"deployment/{OPERATOR}")
        assert after["metadata"]["generation"] > before["metadata"]["generation"]
        assert get("-n", consumer_ns, "streamconsumer/clickstream")["metadata"]["uid"] == uid
        # The CRD is the new one: a field added since the previous chart is accepted.
        named = {**manifest, "metadata": {"name": "named"}}
        named["spec"] = {
            **manifest["spec"],
            "processor": {**manifest["spec"]["processor"], "serviceAccountName": "reader"},
        }
        kubectl(
            "-n", consumer_ns, "apply", "--server-side", "--validate=strict",
            "--dry-run=server", "-f", "-", input=json.dumps(named),
        )  # fmt: skip
    finally:
        flow.logs.stop()
        # All this test installed goes, the CRD too (files after it install the chart anew).
        release.remove(consumer_ns)

    verdict = judge(flow.producer.produced, flow.logs.streams())
    print(
        f"{len(flow.producer.produced)} events through the upgrade, "
        f"{sum(verdict.duplicates.values())} duplicates"
    )
    assert not verdict.lost
    assert not verdict.out_of_order, verdict.out_of_order[:20]
    assert not verdict.duplicates, sorted(verdict.duplicates)[:20]
