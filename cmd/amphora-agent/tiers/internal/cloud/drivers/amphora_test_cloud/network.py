"""Octavia's network driver for the cloud tier: networks, subnets and
ports live in the Go harness (a small model of Neutron); this class turns
Octavia's calls into calls of that model and its answers into Octavia's
data models. What is modelled and what is not: see the "Cloud" section of
cmd/amphora-agent/tiers/README.md."""

from oslo_log import log as logging

from octavia.common import constants
from octavia.common import data_models
from octavia.network import base
from octavia.network import data_models as n_models

from amphora_test_cloud import fabric

LOG = logging.getLogger(__name__)


class NetworkDriver(base.AbstractNetworkDriver):

    # Neutron's driver reads this from Neutron's extensions; the failover
    # flow's GetVIPSecurityGroupID reads it when no group is found.
    sec_grp_enabled = False

    # Lookups.

    @fabric.not_found(base.NetworkNotFound)
    def get_network(self, network_id, context=None):
        return fabric.to_network(fabric.call('network/get_network',
                                             id=network_id))

    @fabric.not_found(base.SubnetNotFound)
    def get_subnet(self, subnet_id, context=None):
        return fabric.to_subnet(fabric.call('network/get_subnet',
                                            id=subnet_id))

    @fabric.not_found(base.PortNotFound)
    def get_port(self, port_id, context=None):
        return fabric.to_port(fabric.call('network/get_port', id=port_id))

    @fabric.not_found(base.NetworkNotFound)
    def get_network_by_name(self, network_name):
        return fabric.to_network(fabric.call('network/get_network',
                                             name=network_name))

    @fabric.not_found(base.SubnetNotFound)
    def get_subnet_by_name(self, subnet_name):
        return fabric.to_subnet(fabric.call('network/get_subnet',
                                            name=subnet_name))

    @fabric.not_found(base.PortNotFound)
    def get_port_by_name(self, port_name):
        return fabric.to_port(fabric.call('network/get_port',
                                          name=port_name))

    @fabric.not_found(base.PortNotFound)
    def get_port_by_net_id_device_id(self, network_id, device_id):
        return fabric.to_port(fabric.call('network/get_port',
                                          network_id=network_id,
                                          device_id=device_id))

    def get_security_group(self, sg_name):
        # Security groups are not modelled: like Neutron's driver without
        # the extension, there is none and that is no error.
        return None

    def get_security_group_by_id(self, sg_id, context=None):
        # Octavia 16 looks up the groups a user names for the VIP
        # (vip_sg_ids); none exists here.
        raise base.SecurityGroupNotFound(
            'security groups are not modelled: %s' % sg_id)

    def get_network_ip_availability(self, network):
        d = fabric.call('network/get_network_ip_availability', id=network.id)
        return n_models.Network_IP_Availability(
            network_id=network.id, total_ips=d['total_ips'],
            used_ips=d['used_ips'], subnet_ip_availability=d['subnets'])

    def qos_enabled(self):
        return False

    # The VIP.

    def allocate_vip(self, load_balancer):
        try:
            d = fabric.call('network/allocate_vip',
                            load_balancer=fabric.lb_dict(load_balancer))
        except fabric.FabricError as e:
            raise base.AllocateVIPException(str(e))
        if load_balancer.additional_vips:
            raise base.AllocateVIPException(
                'additional VIPs are not modelled')
        return fabric.to_vip(d, load_balancer.id), []

    def deallocate_vip(self, vip):
        try:
            fabric.call('network/deallocate_vip', vip=fabric.vip_dict(vip))
        except fabric.FabricError as e:
            raise base.DeallocateVIPException(str(e))

    def update_vip_sg(self, load_balancer, vip):
        # No security groups: nothing to update (the tiers README says so).
        return None

    def update_aap_port_sg(self, load_balancer, amphora, vip):
        # Octavia 16: the groups of an amphora's VRRP port.
        return None

    def update_vip(self, load_balancer, for_delete=False):
        return None

    def plug_aap_port(self, load_balancer, vip, amphora, subnet):
        try:
            d = fabric.call('network/plug_aap_port',
                            load_balancer=fabric.lb_dict(load_balancer),
                            vip=fabric.vip_dict(vip),
                            amphora=fabric.amphora_dict(amphora))
        except fabric.FabricError as e:
            raise base.PlugVIPException(str(e))
        return data_models.Amphora(
            id=amphora.id, compute_id=amphora.compute_id,
            vrrp_ip=d['vrrp_ip'], ha_ip=d['ha_ip'],
            vrrp_port_id=d['vrrp_port_id'], ha_port_id=d['ha_port_id'])

    # plug_vip, plug_network and wait_for_port_detach are Octavia 11's
    # (its driver interface requires them; later releases dropped them).

    def plug_vip(self, load_balancer, vip):
        return [self.plug_aap_port(load_balancer, vip, amp, None)
                for amp in load_balancer.amphorae
                if amp.status != constants.DELETED]

    def unplug_aap_port(self, vip, amphora, subnet):
        try:
            fabric.call('network/unplug_aap_port', vip=fabric.vip_dict(vip),
                        amphora=fabric.amphora_dict(amphora))
        except fabric.FabricError as e:
            raise base.UnplugVIPException(str(e))

    def unplug_vip(self, load_balancer, vip):
        for amp in load_balancer.amphorae:
            if amp.status != constants.DELETED:
                self.unplug_aap_port(vip, amp, None)

    def get_network_configs(self, load_balancer, amphora=None):
        vip_subnet = self.get_subnet(load_balancer.vip.subnet_id)
        vip_port = self.get_port(load_balancer.vip.port_id)
        amps = [amphora] if amphora else load_balancer.amphorae
        configs = {}
        for amp in amps:
            if amp.status == constants.DELETED or not amp.vrrp_port_id:
                continue
            vrrp_port = self.get_port(amp.vrrp_port_id)
            vrrp_port.network = self.get_network(vrrp_port.network_id)
            ha_port = self.get_port(amp.ha_port_id)
            configs[amp.id] = n_models.AmphoraNetworkConfig(
                amphora=amp, vip_subnet=vip_subnet, vip_port=vip_port,
                vrrp_subnet=self.get_subnet(
                    vrrp_port.get_subnet_id(amp.vrrp_ip)),
                vrrp_port=vrrp_port,
                ha_subnet=self.get_subnet(ha_port.get_subnet_id(amp.ha_ip)),
                ha_port=ha_port, additional_vip_data=[])
        return configs

    # Plugging, through the compute side of the harness.

    def get_plugged_networks(self, compute_id):
        return [fabric.to_interface(d) for d in fabric.call(
            'network/get_plugged_networks', compute_id=compute_id)]

    def plug_network(self, compute_id, network_id):
        try:
            return fabric.to_interface(fabric.call(
                'compute/attach_network_or_port', id=compute_id,
                network_id=network_id))
        except fabric.FabricError as e:
            raise base.PlugNetworkException(str(e))

    def unplug_network(self, compute_id, network_id):
        try:
            fabric.call('network/unplug_network', compute_id=compute_id,
                        network_id=network_id)
        except fabric.FabricError as e:
            raise base.UnplugNetworkException(str(e))

    def plug_port(self, amphora, port):
        try:
            return fabric.to_interface(fabric.call(
                'compute/attach_network_or_port', id=amphora.compute_id,
                port_id=port.id))
        except fabric.FabricError as e:
            raise base.PlugNetworkException(str(e))

    def plug_fixed_ip(self, port_id, subnet_id, ip_address=None):
        return fabric.to_port(fabric.call(
            'network/plug_fixed_ip', port_id=port_id, subnet_id=subnet_id,
            ip_address=ip_address))

    def unplug_fixed_ip(self, port_id, subnet_id):
        return fabric.to_port(fabric.call(
            'network/unplug_fixed_ip', port_id=port_id, subnet_id=subnet_id))

    def failover_preparation(self, amphora):
        return None

    def wait_for_port_detach(self, amphora):
        return None

    # Ports the flows make themselves (failover's VIP base port).

    def create_port(self, network_id, name=None, fixed_ips=(),
                    secondary_ips=(), security_group_ids=(),
                    admin_state_up=True, qos_policy_id=None,
                    vnic_type='normal'):
        # vnic_type (Octavia 14 and later) is "normal" or SR-IOV's
        # "direct"; the fabric's ports are all "normal".
        try:
            return fabric.to_port(fabric.call(
                'network/create_port', network_id=network_id, name=name,
                fixed_ips=list(fixed_ips or []),
                secondary_ips=list(secondary_ips or []),
                admin_state_up=admin_state_up))
        except fabric.FabricError as e:
            raise base.CreatePortException(str(e))

    def delete_port(self, port_id):
        try:
            fabric.call('network/delete_port', id=port_id)
        except fabric.NotFound:
            pass

    def set_port_admin_state_up(self, port_id, state):
        try:
            fabric.call('network/set_port_admin_state_up', id=port_id,
                        state=state)
        except fabric.NotFound as e:
            raise base.PortNotFound(str(e))
