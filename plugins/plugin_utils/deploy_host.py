# -*- coding: utf-8 -*-
# Copyright: gpuhost.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host interface of the deploy transaction (plugins/plugin_utils/deploy.py): what ``DeployTransaction``,
``ReplicaRank`` and ``prove_lkg`` call on a host, as abstract base classes (community.docker's ``EngineDriver``
is the same idea). The implementations: ``ModuleHost`` (plugins/action/serving_deploy.py, modules on the real
host), ``LauncherHost`` (plugins/plugin_utils/tune_loop.py, one process launcher) and ``FakeHost``
(tests/harness/fake_deploy_host.py, in memory); tests/unit/plugins/plugin_utils/test_deploy_host.py checks that
each implements every abstract method with the same signature.

``DeployHost`` is one host's deploy; ``ReplicaHost`` adds what a rank of a multi-node replica needs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import abc

from ansible.module_utils.six import with_metaclass


class DeployHost(with_metaclass(abc.ABCMeta, object)):
    """One serving host, as the deploy transaction drives it."""

    @abc.abstractmethod
    def inspect(self):
        """-> {'lkg': record or {}, 'lkg_problem': str, 'active': str, 'clock': host epoch seconds,
        'live_is_lkg': bool, 'invocation': the live unit's systemd invocation or ''}"""

    @abc.abstractmethod
    def install(self, unit_content):
        """Write the unit (and environment) file -> {'unit_changed': bool, 'env_changed': bool, 'diff': {...}}"""

    @abc.abstractmethod
    def restart(self, stop_unit, unit=None):
        """Stop ``stop_unit`` when named, (re)start ``unit`` (default: the deploy's unit) -> host clock before it"""

    @abc.abstractmethod
    def wait_ready(self, unit, health_url, since, timeout):
        """-> {'state': 'ready'|'failed'|'timeout', 'cls', 'hint', 'evidence', 'journal_tail'}; ``cls`` is the
        failure class (plugins/module_utils/serving/ready.py), which later candidates learn from"""

    @abc.abstractmethod
    def canary(self, base_url):
        """The known-answer canary -> a list of failure messages (empty: passed)"""

    @abc.abstractmethod
    def accuracy(self, base_url, action, checks, lkg_file):
        """serving_accuracy's result: ``measure`` writes the reference to lkg_file, ``gate`` compares with it
        ({passed, class, message, requests, seconds}); called only when the spec turns the accuracy gate on"""

    @abc.abstractmethod
    def record(self, meta, timeout_content, remove_paths, forget_unit):
        """Record the live configuration as last-known-good -> the list of changed paths"""

    @abc.abstractmethod
    def restore(self, lkg, restart=True):
        """Put last-known-good's files back (and restart it unless ``restart`` is false) -> host clock before it"""

    @abc.abstractmethod
    def stop(self, unit):
        """Stop ``unit`` -> None"""

    @abc.abstractmethod
    def monotonic(self):
        """-> seconds on the controller's monotonic clock (the load time)"""

    @abc.abstractmethod
    def say(self, line):
        """One line of progress for the operator -> None"""


class ReplicaHost(DeployHost):
    """A rank of a multi-node replica (deploy.py ReplicaRank): the single host's operations and these."""

    @abc.abstractmethod
    def sleep(self, seconds):
        """Wait ``seconds`` (a poll interval) -> None"""

    @abc.abstractmethod
    def reload(self):
        """systemctl daemon-reload -> None"""

    @abc.abstractmethod
    def unit_state(self, unit):
        """-> (ActiveState, MainPID)"""

    @abc.abstractmethod
    def rank_state(self, unit, state_file):
        """-> {'state', 'pid', 'replica': the peer watch's state file, parsed}"""

    @abc.abstractmethod
    def wait_port(self, address, port, timeout):
        """-> True once ``address:port`` accepts a connection within ``timeout`` seconds"""
