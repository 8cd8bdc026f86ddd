"""Octavia's compute driver for the cloud tier: a thin client of the Go
harness, which boots (or records) the amphora and owns its lifetime."""

import base64
import types

from octavia.common import data_models
from octavia.common import exceptions
from octavia.compute import compute_base

from amphora_test_cloud import fabric


def _files(config_drive_files):
    # Octavia hands str or bytes contents; JSON carries them as base64.
    out = {}
    for path, content in (config_drive_files or {}).items():
        if isinstance(content, str):
            content = content.encode()
        out[path] = base64.b64encode(content).decode()
    return out


class ComputeDriver(compute_base.ComputeBase):

    def build(self, name="amphora_name", amphora_flavor=None,
              image_tag=None, image_owner=None, key_name=None,
              sec_groups=None, network_ids=None, port_ids=None,
              config_drive_files=None, user_data=None, server_group_id=None,
              availability_zone=None):
        try:
            answer = fabric.call(
                'compute/build', name=name, flavor=amphora_flavor,
                image_tag=image_tag, image_owner=image_owner,
                key_name=key_name, security_groups=list(sec_groups or []),
                network_ids=list(network_ids or []),
                port_ids=list(port_ids or []),
                config_drive_files=_files(config_drive_files),
                user_data=user_data, server_group_id=server_group_id,
                availability_zone=availability_zone)
        except fabric.FabricError as e:
            raise exceptions.ComputeBuildException(fault=str(e))
        return answer['id']

    def delete(self, compute_id):
        try:
            fabric.call('compute/delete', id=compute_id)
        except fabric.NotFound:
            pass  # Nova's driver also treats a gone server as deleted.
        except fabric.FabricError as e:
            raise exceptions.ComputeDeleteException(compute_msg=str(e))

    def status(self, compute_id):
        try:
            return fabric.call('compute/status', id=compute_id)['status']
        except fabric.FabricError as e:
            raise exceptions.ComputeStatusException() from e

    def get_amphora(self, compute_id, management_network_id=None):
        try:
            d = fabric.call('compute/get_amphora', id=compute_id,
                            management_network_id=management_network_id)
        except fabric.FabricError as e:
            raise exceptions.ComputeGetException() from e
        amp = data_models.Amphora(
            compute_id=d['id'], status=d['status'],
            lb_network_ip=d.get('lb_network_ip'),
            cached_zone=d.get('availability_zone'),
            image_id=d.get('image_id'), compute_flavor=d.get('flavor'))
        return amp, d.get('fault')

    def create_server_group(self, name, policy):
        try:
            d = fabric.call('compute/create_server_group', name=name,
                            policy=policy)
        except fabric.FabricError as e:
            raise exceptions.ServerGroupObjectCreateException() from e
        # Nova's client returns an object of which the flows read .id.
        return types.SimpleNamespace(id=d['id'], name=name, policy=policy)

    def delete_server_group(self, server_group_id):
        try:
            fabric.call('compute/delete_server_group', id=server_group_id)
        except fabric.NotFound:
            pass
        except fabric.FabricError as e:
            raise exceptions.ServerGroupObjectDeleteException() from e

    def attach_network_or_port(self, compute_id, network_id=None,
                               ip_address=None, port_id=None):
        try:
            d = fabric.call('compute/attach_network_or_port', id=compute_id,
                            network_id=network_id, ip_address=ip_address,
                            port_id=port_id)
        except fabric.FabricError as e:
            raise exceptions.ComputeUnknownException(exc=str(e))
        return fabric.to_interface(d)

    def detach_port(self, compute_id, port_id):
        try:
            fabric.call('compute/detach_port', id=compute_id,
                        port_id=port_id)
        except fabric.NotFound:
            pass
        except fabric.FabricError as e:
            raise exceptions.ComputeUnknownException(exc=str(e))

    def validate_flavor(self, flavor_id):
        fabric.call('compute/validate_flavor', id=flavor_id)

    def validate_availability_zone(self, availability_zone):
        fabric.call('compute/validate_availability_zone',
                    name=availability_zone)
