"""The command line (`streamconsumer.cli`) without a cluster: its arguments are checked
before any kubeconfig is read, `--context` picks the kubeconfig's context (and its
namespace), `--version` is the package's, an API error shows the apiserver's own words,
and `pause` promises a hand-off only when an operator took it up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from streamconsumer import __version__, cli


@pytest.fixture
def no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.mark.usefixtures("no_kubeconfig")
@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["reset", "clicks", "--to", "yesterday"], "--to takes one of"),
        (["reset", "clicks", "--to", "timestamp", "2026-01-01T00:00:00"], "time zone"),
        (["reset", "clicks", "--to", "latest", "--timeout", "0"], "--timeout"),
        (["status", "Not_A_Name"], "not a Kubernetes name"),
        (["pause", "clicks", "-n", "Team.A"], "not a Kubernetes namespace"),
        (["checkpoints", "import", "t.json", "--days", "0"], "1 to 365"),
        (["status"], "the following arguments are required: name"),
        (["checkpoints", "import"], "FILE, or --from-kcl-table and --for"),
        (["checkpoints", "import", "--from-kcl-table", "app"], "needs --for MANIFEST"),
        (["checkpoints", "import", "t.json", "--for", "c.yaml"], "go with --from-kcl-table"),
        (["checkpoints", "import", "t.json", "--from-kcl-table", "app"], "takes no FILE"),
        (
            ["checkpoints", "import", "--from-kcl-table", "a", "--for", "c", "--watch", "0"],
            "above 0",
        ),
        (["checkpoints", "import", "--from-kcl-table", "a", "--at-timestamp", "x"], "ISO 8601"),
    ],
)
def test_a_bad_argument_is_a_usage_error_before_any_kubeconfig(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(argv)
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    assert "usage: streamconsumer" in err
    assert said in err
    assert "no usable kubeconfig" not in err


@pytest.mark.usefixtures("no_kubeconfig")
def test_good_arguments_without_a_kubeconfig_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["status", "clicks"])
    assert str(ended.value.code).startswith("streamconsumer: no usable kubeconfig")


def test_version_is_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.main(["--version"])
    assert ended.value.code == 0
    assert capsys.readouterr().out == f"streamconsumer {__version__}\n"


def kubeconfig(path: Path) -> Path:
    clusters = [
        {"name": name, "cluster": {"server": f"https://{name}.example:6443"}} for name in "ab"
    ]
    contexts = [
        {"name": "a", "context": {"cluster": "a", "user": "u", "namespace": "team-a"}},
        {"name": "b", "context": {"cluster": "b", "user": "u"}},
    ]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters,
        "contexts": contexts,
        "users": [{"name": "u", "user": {"token": "t"}}],
        "current-context": "a",
    }
    path.write_text(json.dumps(config))
    return path


def test_context_picks_the_cluster_and_its_namespace(tmp_path: Path) -> None:
    config = str(kubeconfig(tmp_path / "config"))
    assert cli.connect(config, None, None) == "team-a"
    assert k8s.Configuration.get_default_copy().host == "https://a.example:6443"
    assert cli.connect(config, "b", None) == "default"
    assert k8s.Configuration.get_default_copy().host == "https://b.example:6443"
    assert cli.connect(config, "b", "mine") == "mine"


def test_an_unknown_context_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as ended:
        cli.connect(str(kubeconfig(tmp_path / "config")), "c", None)
    assert "streamconsumer: no usable kubeconfig" in str(ended.value.code)
    assert "c" in str(ended.value.code)


def refusal(status: int, reason: str, body: object) -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps(body) if not isinstance(body, str) else body
    return error


def test_an_api_error_shows_the_apiservers_message() -> None:
    forbidden = refusal(
        403,
        "Forbidden",
        {
            "kind": "Status",
            "status": "Failure",
            "message": 'streamconsumers.streamconsumer.io "clicks" is forbidden: User "bob" '
            'cannot patch resource "streamconsumers" in API group "streamconsumer.io" in the '
            'namespace "team-a"',
            "reason": "Forbidden",
            "code": 403,
        },
    )
    assert cli.api_error(forbidden, "team-a", "clicks") == (
        "streamconsumer: the API server refused (403 Forbidden): streamconsumers."
        'streamconsumer.io "clicks" is forbidden: User "bob" cannot patch resource '
        '"streamconsumers" in API group "streamconsumer.io" in the namespace "team-a"'
    )
    conflict = refusal(409, "Conflict", {"kind": "Status", "message": "the object changed"})
    assert cli.api_error(conflict, "team-a", "clicks").endswith(
        "(409 Conflict): the object changed"
    )


def test_not_found_names_the_consumer_or_what_the_apiserver_could_not_find() -> None:
    missing = refusal(
        404,
        "Not Found",
        {
            "kind": "Status",
            "message": 'streamconsumers.streamconsumer.io "clicks" not found',
            "reason": "NotFound",
            "details": {"name": "clicks", "group": "streamconsumer.io", "kind": "streamconsumers"},
            "code": 404,
        },
    )
    assert cli.api_error(missing, "team-a", "clicks") == "streamconsumer: team-a/clicks not found"
    no_crd = refusal(
        404,
        "Not Found",
        {"kind": "Status", "message": "the server could not find the requested resource"},
    )
    assert cli.api_error(no_crd, "team-a", "clicks") == (
        "streamconsumer: the API server refused (404 Not Found): the server could not find "
        "the requested resource"
    )


def test_an_answer_that_is_not_a_status_shows_its_reason() -> None:
    assert cli.api_error(refusal(503, "Service Unavailable", "<html>"), "ns", "x") == (
        "streamconsumer: the API server refused (503 Service Unavailable)"
    )


@pytest.mark.parametrize(
    ("paused", "taken_up", "said"),
    [
        (True, True, "paused: workers hand their shards off"),
        (True, False, "the workers stop at the next sync when an operator runs"),
        (False, True, "resumed"),
        (False, False, "the workers resume at the next sync when an operator runs"),
    ],
)
def test_pause_promises_a_hand_off_only_when_an_operator_took_it_up(
    paused: bool, taken_up: bool, said: str
) -> None:
    outcome = cli.pause_outcome("team-a/clicks", paused, taken_up)
    assert said in outcome
    assert ("hand" in outcome) == (paused and taken_up)


def test_taken_up_when_the_status_observes_the_patched_generation() -> None:
    seen = iter(
        [{"metadata": {"generation": 4}, "status": {"observedGeneration": 3}}] * 2
        + [{"metadata": {"generation": 4}, "status": {"observedGeneration": 4}}]
    )
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    assert cli.taken_up(lambda: next(seen), 4, 5.0, sleep=sleep, clock=lambda: now[0])
    never = {"metadata": {"generation": 4}, "status": {}}
    assert not cli.taken_up(lambda: never, 4, 5.0, sleep=sleep, clock=lambda: now[0])
