# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Grafana stand-in (tests/fixtures/grafana_standin.py) answers like Grafana's HTTP API, failures included; the
grafana.grafana collection's real modules (requirements/collections.txt) and our grafana_annotation module run
in-process against it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from ansible_collections.gpuhost.sglang.plugins.module_utils.monitoring import grafana
from ansible_collections.gpuhost.sglang.plugins.modules import grafana_annotation
from ansible_collections.gpuhost.sglang.tests import harness

sys.path.insert(0, os.path.join(harness.ROOT, "tests", "fixtures"))
import grafana_standin  # noqa: E402  pylint: disable=wrong-import-position

TOKEN = "glsa_standin_admin_0123456789"
VIEWER = "glsa_standin_viewer_0123456789"
DASHBOARDS = os.path.join(harness.ROOT, "roles", "monitoring", "files", "dashboards")

try:
    from ansible_collections.grafana.grafana.plugins.modules import dashboard as gg_dashboard
    from ansible_collections.grafana.grafana.plugins.modules import datasource as gg_datasource
    from ansible_collections.grafana.grafana.plugins.modules import folder as gg_folder
except ImportError:  # pragma: no cover - `make collections` (part of `make setup`) installs it
    gg_dashboard = gg_datasource = gg_folder = None
needs_collection = pytest.mark.skipif(gg_dashboard is None, reason="grafana.grafana not installed: make collections")


@pytest.fixture
def standin():
    """(base URL, state) of a fresh stand-in on a loopback port, in a thread of this process."""
    g = grafana_standin.Grafana(TOKEN, [VIEWER])
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box = {}

    async def start():
        from aiohttp import web  # pylint: disable=import-outside-toplevel
        runner = web.AppRunner(g.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        box["port"], box["runner"] = runner.addresses[0][1], runner
        started.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()), daemon=True)
    thread.start()
    assert started.wait(10)
    yield "http://127.0.0.1:%d" % box["port"], g
    asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def call(url, method="GET", body=None, token=TOKEN):
    """(status, JSON body) of one request."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode())


def test_auth_missing_wrong_and_read_only_tokens(standin):
    url, dummy = standin
    assert call(url + "/api/health", token=None)[0] == 200
    status, body = call(url + "/api/folders", token=None)
    assert (status, body["message"]) == (401, "Unauthorized")
    status, body = call(url + "/api/folders", token="glsa_wrong")
    assert (status, body["message"]) == (401, "Invalid API key")
    assert call(url + "/api/folders", token=VIEWER) == (200, [])
    assert call(url + "/api/annotations", "POST", {"text": "x"}, token=VIEWER)[0] == 403


def test_dashboard_versions_overwrite_and_name_conflicts(standin):
    url, dummy = standin
    dash = {"uid": "u1", "title": "Serving", "version": 0, "panels": []}
    status, got = call(url + "/api/dashboards/db", "POST", {"dashboard": dash, "overwrite": False})
    assert status == 200 and got["status"] == "success" and got["version"] == 1 and got["url"] == "/d/u1/serving"
    # a stale version without overwrite: someone else changed it
    status, got = call(url + "/api/dashboards/db", "POST", {"dashboard": dash, "overwrite": False})
    assert (status, got["status"]) == (412, "version-mismatch"), got
    # the current version saves; overwrite saves whatever the version
    status, got = call(url + "/api/dashboards/db", "POST", {"dashboard": dict(dash, version=1)})
    assert (status, got["version"]) == (200, 2)
    assert call(url + "/api/dashboards/db", "POST", {"dashboard": dash, "overwrite": True})[1]["version"] == 3
    # the same title under another uid in the same folder
    status, got = call(url + "/api/dashboards/db", "POST", {"dashboard": dict(dash, uid="u2")})
    assert (status, got["status"]) == (412, "name-exists")
    assert call(url + "/api/dashboards/db", "POST", {"dashboard": dict(dash, title="")})[0] == 400
    assert call(url + "/api/dashboards/db", "POST", {"dashboard": dash, "folderUid": "nope"})[0] == 400
    status, got = call(url + "/api/dashboards/uid/u1")
    assert status == 200 and got["dashboard"]["version"] == 3 and got["meta"]["folderUid"] == ""
    assert call(url + "/api/dashboards/uid/nope")[0] == 404


def test_folders_uid_conflict_is_412_title_conflict_is_409(standin):
    url, dummy = standin
    status, got = call(url + "/api/folders", "POST", {"uid": "gpuhost", "title": "gpuhost.sglang"})
    assert status == 200 and got["uid"] == "gpuhost" and got["version"] == 1
    assert call(url + "/api/folders", "POST", {"uid": "gpuhost", "title": "gpuhost.sglang"})[0] == 412
    assert call(url + "/api/folders", "POST", {"uid": "other", "title": "gpuhost.sglang"})[0] == 409
    assert call(url + "/api/folders/gpuhost", "PUT", {"title": "x", "version": 7})[0] == 412
    assert call(url + "/api/folders/gpuhost", "PUT", {"title": "x", "overwrite": True})[1]["title"] == "x"
    assert call(url + "/api/folders/nope")[0] == 404


def test_datasource_name_conflict_and_update(standin):
    url, dummy = standin
    ds = {"name": "Prometheus", "type": "prometheus", "access": "proxy", "url": "http://127.0.0.1:9090"}
    status, got = call(url + "/api/datasources", "POST", ds)
    assert status == 200 and got["message"] == "Datasource added"
    status, got2 = call(url + "/api/datasources", "POST", ds)
    assert (status, got2["message"]) == (409, "data source with the same name already exists")
    ident = call(url + "/api/datasources/id/Prometheus")[1]["id"]
    assert ident == got["id"]
    status, upd = call(url + "/api/datasources/%d" % ident, "PUT", dict(ds, url="http://10.0.0.1:9090"))
    assert status == 200 and upd["message"] == "Datasource updated"
    assert call(url + "/api/datasources/name/Prometheus")[1]["url"] == "http://10.0.0.1:9090"
    assert call(url + "/api/datasources/name/nope")[0] == 404


def test_annotations_post_and_find_by_dashboard_tags_and_time(standin):
    url, dummy = standin
    call(url + "/api/dashboards/db", "POST", {"dashboard": {"uid": "d", "title": "D"}})
    status, got = call(url + "/api/annotations", "POST", {"text": "deploy", "tags": ["deploy", "gpu1"],
                                                          "dashboardUID": "d", "time": 1000, "timeEnd": 2000})
    assert (status, got["message"]) == (200, "Annotation added")
    call(url + "/api/annotations", "POST", {"text": "rollback", "tags": ["rollback", "gpu1"], "time": 3000})
    assert call(url + "/api/annotations", "POST", {"text": "", "tags": []})[0] == 400
    assert call(url + "/api/annotations", "POST", {"text": "x", "dashboardUID": "nope"})[0] == 400
    found = call(url + "/api/annotations?tags=gpu1")[1]
    assert [a["text"] for a in found] == ["rollback", "deploy"]
    assert [a["text"] for a in call(url + "/api/annotations?tags=gpu1&tags=deploy")[1]] == ["deploy"]
    assert [a["text"] for a in call(url + "/api/annotations?dashboardUID=d")[1]] == ["deploy"]
    assert [a["text"] for a in call(url + "/api/annotations?from=2500&to=4000")[1]] == ["rollback"]
    assert call(url + "/api/annotations?limit=1")[1][0]["text"] == "rollback"


def test_annotation_client_posts_and_names_what_to_fix(standin):
    url, g = standin
    call(url + "/api/dashboards/db", "POST", {"dashboard": {"uid": "gpuhost-serving", "title": "S"}})
    posted = grafana.AnnotationClient(url, TOKEN).post_all("deploy ok", ["deploy"], ["gpuhost-serving"])
    assert posted[0]["id"] and g.annotations[0]["dashboardUID"] == "gpuhost-serving"
    assert g.annotations[0]["time"] == g.annotations[0]["timeEnd"] and g.annotations[0]["time"] > 1.7e12
    with pytest.raises(grafana.GrafanaError) as exc:
        grafana.AnnotationClient(url, "glsa_wrong").post("x")
    assert "HTTP 401 (Invalid API key)" in str(exc.value) and "monitoring_grafana_token" in str(exc.value)
    assert "glsa_wrong" not in str(exc.value)
    with pytest.raises(grafana.GrafanaError) as exc:
        grafana.AnnotationClient(url, VIEWER).post("x")
    assert "HTTP 403" in str(exc.value) and "annotations:create" in str(exc.value)
    with pytest.raises(grafana.GrafanaError) as exc:
        grafana.AnnotationClient(url, TOKEN).post("x", dashboard_uid="nope")
    assert "HTTP 400 (Invalid dashboard UID in annotation request)" in str(exc.value)
    with pytest.raises(grafana.GrafanaError, match="monitoring_grafana_url is 'grafana:3000'"):
        grafana.AnnotationClient("grafana:3000", TOKEN)
    with pytest.raises(grafana.GrafanaError, match="monitoring_grafana_token is empty"):
        grafana.AnnotationClient(url, "")
    with pytest.raises(grafana.GrafanaError, match="not reachable"):
        grafana.AnnotationClient("http://127.0.0.1:1", TOKEN).post("x")


def test_annotation_module_fails_or_warns_and_never_prints_the_token(standin, capsys):
    url, g = standin
    args = dict(url=url, token="glsa_wrong", text="rollback on gpu1", tags=["rollback"])
    res = harness.call_module(capsys, grafana_annotation, args)
    assert res.rc == 1 and "HTTP 401" in res["msg"] and "glsa_wrong" not in res.stdout
    res = harness.call_module(capsys, grafana_annotation, dict(args, on_error="warn"))
    assert res.rc == 0 and not res["changed"] and "HTTP 401" in json.dumps(res["warnings"])
    res = harness.call_module(capsys, grafana_annotation, dict(args, token=TOKEN), check_mode=True)
    assert res.rc == 0 and res["changed"] and not g.annotations
    res = harness.call_module(capsys, grafana_annotation, dict(args, token=TOKEN, time_ms=5000))
    assert res.rc == 0 and res["annotations"][0]["time"] == 5000 and TOKEN not in res.stdout
    assert [a["text"] for a in g.annotations] == ["rollback on gpu1"]


@needs_collection
def test_grafana_grafana_modules_against_the_standin(standin, capsys):
    """The collection's own modules: folder is idempotent through the 412, datasource updates through the 409,
    dashboard posts whatever it is given (always changed: the role compares before calling it)."""
    url, g = standin
    common = dict(grafana_url=url + "/", grafana_api_key=TOKEN)
    res = harness.call_module(capsys, gg_folder, dict(common, uid="gpuhost", title="gpuhost.sglang"))
    assert res.rc == 0 and res["changed"], res
    res = harness.call_module(capsys, gg_folder, dict(common, uid="gpuhost", title="gpuhost.sglang"))
    assert res.rc == 0 and not res["changed"], res
    ds = {"name": "Prometheus", "type": "prometheus", "access": "proxy", "url": "http://127.0.0.1:9090",
          "isDefault": True}
    assert harness.call_module(capsys, gg_datasource, dict(common, dataSource=ds)).rc == 0
    res = harness.call_module(capsys, gg_datasource, dict(common, dataSource=dict(ds, url="http://10.0.0.9:9090")))
    assert res.rc == 0 and res["output"]["message"] == "Datasource updated"
    assert list(g.datasources.values())[0]["url"] == "http://10.0.0.9:9090"
    with open(os.path.join(DASHBOARDS, "gpuhost-serving.json")) as f:
        dash = json.load(f)
    body = {"dashboard": dash, "folderUid": "gpuhost", "overwrite": True}
    res = harness.call_module(capsys, gg_dashboard, dict(common, dashboard=body))
    assert res.rc == 0 and res["output"]["uid"] == "gpuhost-serving", res
    assert g.dashboards["gpuhost-serving"]["folderUid"] == "gpuhost"
    res = harness.call_module(capsys, gg_dashboard, dict(common, grafana_api_key="glsa_wrong", dashboard=body))
    assert res.rc == 1 and res["msg"] == "{'status': 401, 'response': 'Invalid API key'}", res
    assert "glsa_wrong" not in res.stdout
    res = harness.call_module(capsys, gg_dashboard, dict(common, dashboard=dict(body, folderUid="nope")))
    assert res.rc == 1 and "'status': 400" in res["msg"], res


def playbook(tmp_path, url, token, includes, *args):
    """One ansible-playbook run on the controller of roles/monitoring tasks_from for each (tasks_from, vars) in
    ``includes``, in order; (rc, output)."""
    tasks = [{"name": "monitoring %s %d" % (tasks_from, n), "ansible.builtin.include_role": {
        "name": "gpuhost.sglang.monitoring", "tasks_from": tasks_from}, "vars": extra}
        for n, (tasks_from, extra) in enumerate(includes)]
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": tasks,
             "vars": {"monitoring_grafana_url": url, "monitoring_grafana_token": token}}]
    path = tmp_path / "play.yml"
    path.write_text(json.dumps(play))
    proc = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                           "-c", "local", str(path)] + list(args), env=harness.ansible_env(), cwd=harness.ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def recap(out):
    line = [x for x in out.splitlines() if x.startswith("localhost") and "ok=" in x][-1]
    return dict(kv.split("=") for kv in line.split(":", 1)[1].split())


PROVISION = [("grafana.yml", {})]


def provisioned_earlier(url, g):
    """The state a first run of the role leaves (molecule monitoring runs that one, and its idempotence run):
    the folder, the datasource and both dashboards at version 1."""
    assert call(url + "/api/folders", "POST", {"uid": "gpuhost-sglang", "title": "gpuhost.sglang"})[0] == 200
    assert call(url + "/api/datasources", "POST", {"name": "Prometheus", "type": "prometheus", "access": "proxy",
                                                   "url": "http://127.0.0.1:9090", "isDefault": True})[0] == 200
    for name in sorted(os.listdir(DASHBOARDS)):
        with open(os.path.join(DASHBOARDS, name)) as f:
            body = {"dashboard": json.load(f), "folderUid": "gpuhost-sglang", "overwrite": False}
        body["dashboard"]["version"] = 0
        assert call(url + "/api/dashboards/db", "POST", body)[1]["version"] == 1
    return dict((uid, d["version"]) for uid, d in g.dashboards.items())


@needs_collection
def test_role_grafana_path_puts_back_what_changed_and_fails_clearly(standin, tmp_path):
    """roles/monitoring tasks/grafana.yml with the real grafana.grafana modules, over what a first run left: a
    dashboard edited in Grafana is written back over the version Grafana has (the other is not touched), a moved
    datasource is updated in place; a wrong token fails naming monitoring_grafana_token, the token in no output even
    at -vvv. (The first run and the no-change second run are molecule monitoring's converge and idempotence.)"""
    url, g = standin
    assert provisioned_earlier(url, g) == {"gpuhost-serving": 1, "gpuhost-gpu": 1}
    ident = list(g.datasources)[0]
    g.dashboards["gpuhost-gpu"]["dashboard"]["title"] = "edited"
    g.dashboards["gpuhost-gpu"]["version"] = g.dashboards["gpuhost-gpu"]["dashboard"]["version"] = 2
    rc, out = playbook(tmp_path, url, TOKEN, [("grafana.yml", {"monitoring_grafana_prometheus_url": "http://10.1.2.3:9090"})])
    assert rc == 0 and int(recap(out)["changed"]) == 2, out[-3000:]   # the datasource, the dashboards loop
    assert g.dashboards["gpuhost-gpu"]["dashboard"]["title"] == "gpuhost.sglang / GPUs"
    assert g.dashboards["gpuhost-gpu"]["version"] == 3 and g.dashboards["gpuhost-serving"]["version"] == 1
    assert list(g.datasources) == [ident] and g.datasources[ident]["url"] == "http://10.1.2.3:9090"
    assert list(g.folders) == ["gpuhost-sglang"]
    rc, out = playbook(tmp_path, url, "glsa_wrong_0123", PROVISION, "-vvv")
    assert rc == 2 and "Grafana refused monitoring_grafana_token" in out and "HTTP 401" in out, out[-3000:]
    assert "glsa_wrong_0123" not in out


@needs_collection
def test_role_annotate_posts_opt_in_and_never_logs_the_token(standin, tmp_path):
    url, g = standin
    assert call(url + "/api/dashboards/db", "POST", {"dashboard": {"uid": "gpuhost-serving", "title": "S"}})[0] == 200
    rc, out = playbook(tmp_path, url, TOKEN, [
        ("annotate", {"monitoring_annotation_text": "off by default"}),
        ("annotate", {"monitoring_annotations": True, "monitoring_annotation_text": "deploy done",
                      "monitoring_annotation_tags": ["deploy"]}),
        ("annotate", {"monitoring_annotations": True, "monitoring_annotation_text": "rollback",
                      "monitoring_grafana_token": "glsa_wrong_0123", "monitoring_annotation_on_error": "warn"}),
        ("annotate", {"monitoring_annotations": True, "monitoring_annotation_text": "refused",
                      "monitoring_grafana_token": "glsa_wrong_0123"})], "-vvv")
    assert rc == 2, out[-3000:]                                   # the last one fails the play
    assert TOKEN not in out and "glsa_wrong_0123" not in out
    (a,) = g.annotations
    assert (a["text"], a["dashboardUID"], a["tags"]) == ("deploy done", "gpuhost-serving", ["gpuhost", "deploy", "localhost"])
    assert "annotation not posted" in out and "HTTP 401 (Invalid API key)" in out, out[-3000:]
    assert int(recap(out)["failed"]) == 1 and int(recap(out)["changed"]) == 1, out[-3000:]
