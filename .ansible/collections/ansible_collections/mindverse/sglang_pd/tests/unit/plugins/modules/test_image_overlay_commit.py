# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""image_overlay_commit against the real Docker engine (unified image v2 recipe, in miniature).

BASE and CA are imported from tarballs built in the test; nothing is pulled,
no container is started, and every image and container made here is removed.
"""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from ansible.module_utils import basic
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_artifacts as ia
from ansible_collections.mindverse.sglang_pd.plugins.module_utils import _image_overlay_commit as oc
from ansible_collections.mindverse.sglang_pd.plugins.modules import image_artifacts, image_overlay_commit
from module_runner import run_module
from test_image_artifacts import (
    BASE_FILES,
    CA_FILES,
    ENGINE_SO,
    ENGINE_V3,
    ROUTER,
    ROUTER_PY,
    ROUTER_SO,
    ImageFactory,
    md5,
)

docker = pytest.importorskip('docker')
pytestmark = pytest.mark.docker

ROUTER_FILES = sorted(p[len(ROUTER) + 1:] for p in CA_FILES if p.startswith(ROUTER + '/'))


@pytest.fixture(scope='module')
def docker_client():
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # pylint: disable=broad-except
        pytest.skip('no Docker daemon answers: %s' % exc)
    yield client
    client.close()


@pytest.fixture(scope='module')
def images(docker_client):
    factory = ImageFactory(docker_client)
    factory.make(BASE_FILES, changes=['CMD ["/bin/sh"]', 'ENV FOO=bar', 'LABEL origin=base'], tag='base')
    factory.make(CA_FILES, changes=['CMD ["/bin/sh"]'], tag='ca')
    factory.make(BASE_FILES, tag='nocmd')
    yield factory
    factory.cleanup()
    assert not docker_client.images.list(name=factory.repository)


@pytest.fixture()
def engine_v3(tmp_path):
    path = tmp_path / 'engine_v3.so'
    path.write_bytes(ENGINE_V3)
    return str(path)


def build_args(images, target, engine_v3, **extra):
    args = dict(
        base=images.ref('base'),
        target=images.ref(target),
        replace_dirs=[dict(source_image=images.ref('ca'), path=ROUTER)],
        overlays=[dict(src=engine_v3, dest=ENGINE_SO, md5=md5(ENGINE_V3))],
        labels={'org.example.build': 'unit'},
        commit_message='unified v2: base + full cache-aware sglang_router package',
    )
    args.update(extra)
    return args


def build(images, args, check_mode=False):
    result = run_module(image_overlay_commit, args, check_mode=check_mode, diff=True)
    images.track(result.get('image_id'))
    return result


def list_dir(client, image, path):
    """Names below ``path`` in ``image``, read with the SDK directly (independent of the modules)."""
    container = client.containers.create(image, command=['/never-run'])
    try:
        chunks, dummy = container.get_archive(path)
        data = b''.join(chunks)
    finally:
        container.remove(force=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        root = archive.getmembers()[0].name.rstrip('/')
        return sorted(m.name[len(root) + 1:] for m in archive.getmembers() if m.name != root)


def verify(images, ref, artifacts, tmp_path):
    return run_module(image_artifacts, dict(image=ref, artifacts=artifacts, cache_dir=str(tmp_path / 'c')))


def test_unified_build_replaces_whole_package(docker_client, images, engine_v3, tmp_path):
    args = build_args(images, 'unified', engine_v3)

    check = build(images, args, check_mode=True)
    assert check['changed'] is True and check['image_id'] is None
    assert check['reason'] == 'target absent'
    assert not docker_client.images.list(name=images.ref('unified'))

    first = build(images, args)
    assert first['changed'] is True and first['image_id'].startswith('sha256:')
    assert first['diff']['before']['image_id'] is None
    assert first['diff']['after']['image_id'] == first['image_id']
    replaced = first['replaced'][0]
    assert replaced['existed_in_base'] is True
    assert replaced['files'] == dict((name, md5(CA_FILES[ROUTER + '/' + name])) for name in ROUTER_FILES)

    # Inside the image: the package is CA's, BASE-only files are gone, the overlay is in place.
    assert list_dir(docker_client, images.ref('unified'), ROUTER) == ROUTER_FILES
    manifest = [dict(path=ROUTER + '/' + name, md5=md5(CA_FILES[ROUTER + '/' + name])) for name in ROUTER_FILES]
    manifest += [
        dict(path=ROUTER_PY, text_count=[dict(pattern='prefill_group_ids', count=0)]),
        dict(path=ROUTER + '/base_only.py', state='absent'),
        dict(path=ROUTER + '/base_only_dir', state='absent'),
        dict(path=ENGINE_SO, md5=md5(ENGINE_V3)),
        dict(path=ENGINE_SO.replace('mooncake/engine.cpython-310-x86_64-linux-gnu.so', 'engine_link.so'),
             md5=md5(ENGINE_V3)),
    ]
    checked = verify(images, images.ref('unified'), manifest, tmp_path)
    assert checked['passed'] is True, checked.get('msg')
    so = [a for a in checked['artifacts'] if a['path'] == ROUTER_SO][0]
    assert so['md5'] == md5(CA_FILES[ROUTER_SO])

    # Labels and configuration.
    image = docker_client.images.get(images.ref('unified'))
    labels = image.labels
    assert labels[oc.LABEL_INPUTS] == first['inputs_hash']
    base = docker_client.images.get(images.ref('base'))
    ca = docker_client.images.get(images.ref('ca'))
    assert json.loads(labels[oc.LABEL_BASE])['id'] == base.id
    assert [s['id'] for s in json.loads(labels[oc.LABEL_SOURCES])] == [ca.id]
    assert json.loads(labels[oc.LABEL_OVERLAYS]) == {ENGINE_SO: md5(ENGINE_V3)}
    assert labels['org.example.build'] == 'unit' and labels['origin'] == 'base'
    assert set(labels) == set(base.labels) | set(first['labels']) | {'org.example.build'}
    assert ia.LABEL_TRANSIENT not in labels
    for key, value in base.attrs['Config'].items():
        if key not in ('Labels', 'Image'):
            assert image.attrs['Config'].get(key) == value, key
    assert image.attrs['Config']['Cmd'] == ['/bin/sh']
    assert 'FOO=bar' in image.attrs['Config']['Env']
    assert image.attrs['Comment'] == args['commit_message']
    assert len(image.attrs['RootFS']['Layers']) == len(base.attrs['RootFS']['Layers']) + 1
    assert engine_mode(docker_client, images.ref('unified')) == 0o755  # kept from BASE

    # Second run and check mode: nothing to do.
    second = build(images, args)
    assert second['changed'] is False and second['image_id'] == first['image_id']
    assert second['reason'].startswith('up to date')
    again = build(images, args, check_mode=True)
    assert again['changed'] is False
    assert images.transient_containers() == []


def engine_mode(client, ref):
    container = client.containers.create(ref, command=['/never-run'])
    try:
        return container.get_archive(ENGINE_SO)[1]['mode'] & 0o777
    finally:
        container.remove(force=True)


def test_changed_input_rebuilds(docker_client, images, engine_v3, tmp_path):
    args = build_args(images, 'rebuild', engine_v3)
    first = build(images, args)
    changed = build(images, dict(args, labels={'org.example.build': 'other'}))
    assert changed['changed'] is True and changed['previous_image_id'] == first['image_id']
    assert changed['image_id'] != first['image_id']
    assert changed['reason'].startswith('inputs changed')
    assert build(images, dict(args, labels={'org.example.build': 'other'}))['changed'] is False


def test_v1_style_build_is_caught_by_artifacts(docker_client, images, tmp_path):
    """Only the .so replaced (the failed v1): the manifest catches the stale wrapper."""
    ca_so = tmp_path / 'ca_router.so'
    ca_so.write_bytes(CA_FILES[ROUTER_SO])
    result = build(images, dict(
        base=images.ref('base'), target=images.ref('v1'),
        overlays=[dict(src=str(ca_so), dest=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO]))]))
    assert result['changed'] is True
    checked = verify(images, images.ref('v1'), [
        dict(path=ROUTER_SO, md5=md5(CA_FILES[ROUTER_SO])),
        dict(path=ROUTER_PY, md5=md5(CA_FILES[ROUTER_PY]),
             text_count=[dict(pattern='prefill_group_ids', count=0)]),
    ], tmp_path)
    assert checked['failed'] is True
    assert checked['artifacts'][0]['match'] == 'full'
    assert "%s: lines containing 'prefill_group_ids' expected 0, found 2." % ROUTER_PY in checked['failures']


def test_overlay_md5_mismatch_fails_before_building(docker_client, images, engine_v3):
    wrong = md5(b'something else')
    result = build(images, build_args(images, 'never', engine_v3,
                                      overlays=[dict(src=engine_v3, dest=ENGINE_SO, md5=wrong)]))
    assert result['failed'] is True
    assert engine_v3 in result['msg'] and wrong in result['msg'] and md5(ENGINE_V3) in result['msg']
    assert not docker_client.images.list(name=images.ref('never'))
    missing = build(images, build_args(images, 'never', engine_v3,
                                       overlays=[dict(src=engine_v3 + '.nope', dest=ENGINE_SO, md5=wrong)]))
    assert missing['failed'] is True and 'not found on this host' in missing['msg']


def test_source_without_directory_fails_and_leaves_nothing(docker_client, images, engine_v3):
    result = build(images, build_args(images, 'never', engine_v3, replace_dirs=[
        dict(source_image=images.ref('ca'), path=ROUTER, source_path='/opt/nothing')]))
    assert result['failed'] is True and '/opt/nothing is not a directory' in result['msg']
    assert not docker_client.images.list(name=images.ref('never'))
    assert images.transient_containers() == []


def test_missing_base_fails_with_advice(images, engine_v3):
    result = build(images, build_args(images, 'never', engine_v3, base=images.ref('no-such-base')))
    assert result['failed'] is True and 'pull it first' in result['msg']


def test_check_mode_before_the_pull_reports_the_build(docker_client, images, engine_v3):
    result = build(images, build_args(images, 'never', engine_v3, base=images.ref('not-pulled-yet')),
                   check_mode=True)
    assert result['changed'] is True and result.get('failed') is None
    assert 'not-pulled-yet' in result['reason']


def test_directory_new_to_base_is_added(docker_client, images, engine_v3):
    result = build(images, build_args(images, 'new-dir', engine_v3, overlays=[], replace_dirs=[
        dict(source_image=images.ref('ca'), path='/opt/venv/sglang_router_copy', source_path=ROUTER)]))
    assert result['changed'] is True and result['replaced'][0]['existed_in_base'] is False
    assert list_dir(docker_client, images.ref('new-dir'), '/opt/venv/sglang_router_copy') == ROUTER_FILES


def test_base_without_cmd_warns(docker_client, images, engine_v3, monkeypatch):
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    result = build(images, build_args(images, 'from-nocmd', engine_v3, base=images.ref('nocmd')))
    assert result['changed'] is True
    assert any('neither CMD nor ENTRYPOINT' in w for w in warnings)
    image = docker_client.images.get(images.ref('from-nocmd'))
    assert image.attrs['Config']['Cmd'] == ia.PLACEHOLDER_COMMAND


@pytest.mark.parametrize('target, expected', [
    ('registry.example:5000/mindverse/sglang:v1', ('registry.example:5000/mindverse/sglang', 'v1')),
    ('registry.example:5000/mindverse/sglang', ('registry.example:5000/mindverse/sglang', 'latest')),
    ('sglang:unified', ('sglang', 'unified')),
])
def test_split_target(target, expected):
    assert oc.split_target(target) == expected


def test_split_target_refuses_digest():
    with pytest.raises(ia.ArtifactError, match='not a digest'):
        oc.split_target('mindverse/sglang@sha256:' + '0' * 64)
