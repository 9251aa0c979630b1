"""ACLs and the StandardAuthorizer (issue 17): an authorization matrix over a SASL_PLAINTEXT (PLAIN) listener, the
same against Annal and against Apache Kafka (`INTEROP_BROKER=kafka`) started from the same server.properties.

Users: admin (in super.users), alice (given ACLs by the test), bob (no ACLs). The inter-broker and controller
listeners are PLAINTEXT, so User:ANONYMOUS is a super user too, as Kafka requires of brokers. Each request is
built with kafka-python's protocol classes (Kafka's JSON schemas) and sent on a raw socket after a SASL PLAIN
exchange, so the error codes the broker answers are visible as they are; each case is asserted with and without
the ACL it needs. Also: Kafka's `kafka-acls` tool adds, lists and removes ACLs, and ACLs survive a kill -9.
"""
import base64
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from kafka.protocol.admin import (CreateAclsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteAclsRequest,
                                  DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeAclsRequest,
                                  DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest,
                                  ElectLeadersRequest, IncrementalAlterConfigsRequest, ListGroupsRequest)
from kafka.protocol.consumer import (FetchRequest, JoinGroupRequest, ListOffsetsRequest, OffsetCommitRequest,
                                     OffsetFetchRequest)
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

import kwire
from brokers import START_TIMEOUT_S, api_versions_answered, free_port, remove_workdir
from test_dump_log_segments import kafka_classpath

pytestmark = pytest.mark.security

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret" user_bob="bob-secret";')

# Kafka's codes.
NONE, UNKNOWN_TOPIC_OR_PARTITION = 0, 3
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
INVALID_REQUEST, MEMBER_ID_REQUIRED = 42, 79
# ResourceType, PatternType, AclOperation, AclPermissionType codes.
TOPIC, GROUP, CLUSTER, TXN_ID = 2, 3, 4, 5
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, ALL = 10, 11, 2
DENY, ALLOW = 2, 3


def server_properties(d, port, plain_port, ctrl_port):
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@127.0.0.1:{ctrl_port}",
        f"listeners=SASL_PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{plain_port},"
        f"CONTROLLER://127.0.0.1:{ctrl_port}",
        f"advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{port},PLAINTEXT://127.0.0.1:{plain_port}",
        "inter.broker.listener.name=PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        f"log.dirs={d}/data",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        "auto.create.topics.enable=true",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"authorizer.class.name={STANDARD_AUTHORIZER}",
        "super.users=User:admin;User:ANONYMOUS",
        "",
    ])


class AuthzBroker:
    """Annal (`annal serve --config`) or Kafka (`kafka.Kafka`) from the same server.properties."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="annal-authz-"))
        self.port, self.plain_port, self.ctrl_port = free_port(), free_port(), free_port()
        self.props = self.dir / "server.properties"
        self.props.write_text(server_properties(self.dir, self.port, self.plain_port, self.ctrl_port))
        self.kind = "kafka" if os.environ.get("INTEROP_BROKER") == "kafka" else "annal"
        if self.kind == "kafka":
            self.java = ["java", "-Xms256m", "-Xmx512m", "-cp", kafka_classpath()]
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
            subprocess.run(self.java + ["kafka.tools.StorageTool", "format", "-t", cluster_id,
                                        "-c", str(self.props)], check=True, capture_output=True)
        elif not os.environ.get("ANNAL_BIN"):
            pytest.skip("set ANNAL_BIN (or INTEROP_BROKER=kafka)")
        self.start()

    def start(self):
        if self.kind == "kafka":
            cmd = self.java + ["kafka.Kafka", str(self.props)]
        else:
            cmd = [os.environ["ANNAL_BIN"], "serve", "--config", str(self.props)]
        self.log = open(self.dir / "broker.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S * 2
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited during start-up:\n{self.tail()}")
            if api_versions_answered("127.0.0.1", self.plain_port, timeout=1.0):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.kind} did not serve within the start timeout:\n{self.tail()}")

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.log.close()

    def tail(self, lines=40):
        return "\n".join((self.dir / "broker.log").read_text(errors="replace").splitlines()[-lines:])

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        remove_workdir(self.dir)


class Session:
    """A SASL PLAIN-authenticated connection sending kafka-python protocol objects and returning the decoded
    responses."""

    def __init__(self, broker, user):
        self.user = user
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
        self.cid = 0
        assert self.call(SaslHandshakeRequest[1](mechanism="PLAIN")).error_code == 0
        token = f"\0{user}\0{user}-secret".encode()
        auth = self.call(SaslAuthenticateRequest[2](auth_bytes=token))
        assert auth.error_code == 0, f"{user} could not log in: {auth.error_message}"

    def send(self, req):
        self.cid += 1
        req.with_header(correlation_id=self.cid, client_id=f"authz-{self.user}")
        self.sock.sendall(bytes(req.encode(header=True, framed=True)))
        return req

    def call(self, req):
        req = self.send(req)
        frame = kwire.recv_frame(self.sock)
        assert frame is not None, f"the broker closed {self.user}'s connection instead of answering {req.name}"
        resp = req.header.get_response_class().decode(frame, header=True)
        assert resp.header.correlation_id == self.cid
        return resp

    def closed(self, within=10.0):
        self.sock.settimeout(within)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def authz():
    if os.environ.get("INTEROP_BOOTSTRAP"):
        pytest.skip("starts its own broker with an authorizer; INTEROP_BOOTSTRAP is set")
    b = AuthzBroker()
    yield b
    assert b.proc.poll() is None, f"the broker died during the authorization tests:\n{b.tail()}"
    b.close()


@pytest.fixture(scope="module")
def users(authz):
    s = {u: Session(authz, u) for u in ("admin", "alice", "bob")}
    yield s
    for c in s.values():
        c.close()


def acl(rtype, name, ptype, principal, op, perm=ALLOW, host="*"):
    return CreateAclsRequest.AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=ptype,
                                         principal=principal, host=host, operation=op, permission_type=perm)


def create_acls(session, *acls):
    r = session.call(CreateAclsRequest[3](creations=list(acls)))
    return [x.error_code for x in r.results]


def create_topics(session, *names, partitions=1):
    r = session.call(CreateTopicsRequest[7](topics=[CreateTopicsRequest.CreatableTopic(
        name=n, num_partitions=partitions, replication_factor=1, assignments=[], configs=[]) for n in names],
        timeout_ms=20000, validate_only=False))
    return {t.name: t.error_code for t in r.topics}


def wait_for_metadata(session, *names):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = metadata(session, list(names))
        if all(got.get(n) == NONE for n in names):
            return
        time.sleep(0.2)
    raise AssertionError(f"topics {names} not in metadata: {got}")


def metadata(session, names, auto_create=False):
    topics = None if names is None else [MetadataRequest.MetadataRequestTopic(name=n) for n in names]
    r = session.call(MetadataRequest[12](topics=topics, allow_auto_topic_creation=auto_create,
                                         include_topic_authorized_operations=False))
    return {t.name: t.error_code for t in r.topics}


def produce(session, topic):
    batch = kwire.record_batch([b"authz"])
    r = session.call(ProduceRequest[9](transactional_id=None, acks=-1, timeout_ms=10000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])]))
    return r.responses[0].partition_responses[0].error_code


def fetch(session, topic):
    r = session.call(FetchRequest[12](replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
                                      isolation_level=0, session_id=0, session_epoch=-1, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id=""))
    assert r.error_code == 0
    return {t.topic: t.partitions[0].error_code for t in r.responses}[topic]


def list_offsets(session, topic):
    r = session.call(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                                     timestamp=-1)])]))
    return r.topics[0].partitions[0].error_code


def delete_topics(session, *names):
    r = session.call(DeleteTopicsRequest[5](topic_names=list(names), timeout_ms=20000))
    return {t.name: t.error_code for t in r.responses}


def describe_configs(session, rtype, name):
    r = session.call(DescribeConfigsRequest[4](resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=None)], include_synonyms=False,
        include_documentation=False))
    return r.results[0].error_code


def alter_config(session, topic):
    R = IncrementalAlterConfigsRequest
    r = session.call(R[1](resources=[R.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        R.AlterConfigsResource.AlterableConfig(name="retention.ms", config_operation=0, value="86400000")])],
        validate_only=False))
    return r.responses[0].error_code


def create_partitions(session, topic, count):
    r = session.call(CreatePartitionsRequest[3](topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=topic, count=count, assignments=None)], timeout_ms=20000, validate_only=False))
    return r.results[0].error_code


def delete_records(session, topic):
    r = session.call(DeleteRecordsRequest[2](topics=[DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])],
        timeout_ms=20000))
    return r.topics[0].partitions[0].error_code


def retried(f):
    """Retries while the coordinator loads or moves (14, 15, 16) or a transaction settles (51), as clients do."""
    def run(*args, **kwargs):
        deadline = time.monotonic() + 30
        while True:
            code = f(*args, **kwargs)
            if code not in (14, 15, 16, 51) or time.monotonic() > deadline:
                return code
            time.sleep(0.3)
    return run


def find_coordinator(session, key, key_type=0):
    # COORDINATOR_NOT_AVAILABLE while the internal topic is being created: retried, as clients do.
    deadline = time.monotonic() + 30
    while True:
        r = session.call(FindCoordinatorRequest[4](key_type=key_type, coordinator_keys=[key]))
        code = r.coordinators[0].error_code
        if code != 15 or time.monotonic() > deadline:
            return code
        time.sleep(0.3)


@retried
def join_group(session, group):
    r = session.call(JoinGroupRequest[9](group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                         member_id="", group_instance_id=None, protocol_type="consumer",
                                         protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                              metadata=b"")],
                                         reason=None))
    return r.error_code


@retried
def offset_commit(session, group, topic):
    R = OffsetCommitRequest
    r = session.call(R[8](group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                          topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
                              R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                  partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                  committed_metadata="")])]))
    return r.topics[0].partitions[0].error_code


@retried
def offset_fetch(session, group, topic):
    R = OffsetFetchRequest
    r = session.call(R[8](groups=[R.OffsetFetchRequestGroup(group_id=group, topics=[
        R.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])],
        require_stable=False))
    g = r.groups[0]
    if g.error_code:
        return g.error_code
    return g.topics[0].partitions[0].error_code


@retried
def describe_group(session, group):
    r = session.call(DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False))
    return r.groups[0].error_code


def list_groups(session):
    r = session.call(ListGroupsRequest[4](states_filter=[]))
    assert r.error_code == 0
    return {g.group_id for g in r.groups}


@retried
def delete_group(session, group):
    r = session.call(DeleteGroupsRequest[2](groups_names=[group]))
    return r.results[0].error_code


@retried
def init_producer_id(session, transactional_id):
    r = session.call(InitProducerIdRequest[4](transactional_id=transactional_id, transaction_timeout_ms=60000,
                                              producer_id=-1, producer_epoch=-1))
    return r.error_code


def describe_acls(session, **filters):
    f = dict(resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY, principal_filter=None,
             host_filter=None, operation=ANY, permission_type=ANY)
    f.update(filters)
    return session.call(DescribeAclsRequest[3](**f))


def wait_for_acls(session, principal, n):
    """Kafka answers CreateAcls once the controller committed them; its brokers apply them a moment later."""
    deadline = time.monotonic() + 30
    while sum(len(r.acls) for r in describe_acls(session, principal_filter=principal).resources) < n:
        assert time.monotonic() < deadline, f"{principal}'s {n} ACLs did not reach the broker"
        time.sleep(0.2)


def test_authorization_matrix(authz, users):
    admin, alice, bob = users["admin"], users["alice"], users["bob"]
    topics = ["az-write", "az-read", "az-cfg", "az-alter", "az-del", "az-recs", "az-secret"]
    assert create_topics(admin, *topics) == {t: NONE for t in topics}
    wait_for_metadata(admin, *topics)
    assert create_acls(
        admin,
        acl(TOPIC, "az-write", LITERAL, "User:alice", WRITE),
        acl(TOPIC, "az-read", LITERAL, "User:alice", READ),
        acl(TOPIC, "az-cfg", LITERAL, "User:alice", ALTER_CONFIGS),
        acl(TOPIC, "az-alter", LITERAL, "User:alice", ALTER),
        acl(TOPIC, "az-del", LITERAL, "User:alice", DELETE),
        acl(TOPIC, "az-recs", LITERAL, "User:alice", DELETE),
        acl(TOPIC, "az-new-", PREFIXED, "User:alice", CREATE),
        acl(TOPIC, "az-ghost", LITERAL, "User:alice", DESCRIBE),
        acl(TOPIC, "az-secret", LITERAL, "User:alice", ALL),
        acl(TOPIC, "az-secret", LITERAL, "User:alice", READ, perm=DENY),
        acl(GROUP, "g-alice", PREFIXED, "User:alice", READ),
        acl(GROUP, "g-alice-del", LITERAL, "User:alice", DELETE),
        acl(TXN_ID, "tx-alice", LITERAL, "User:alice", WRITE),
    ) == [NONE] * 13
    wait_for_acls(admin, "User:alice", 13)

    # Produce: WRITE on the topic; a topic that does not exist is refused first when not writable.
    assert produce(alice, "az-write") == NONE
    assert produce(bob, "az-write") == TOPIC_AUTH
    assert produce(alice, "az-read") == TOPIC_AUTH
    assert produce(bob, "az-missing") == TOPIC_AUTH
    # Fetch: READ; DENY READ beats ALLOW ALL.
    assert fetch(alice, "az-read") == NONE
    assert fetch(bob, "az-read") == TOPIC_AUTH
    assert fetch(alice, "az-write") == TOPIC_AUTH
    assert fetch(alice, "az-secret") == TOPIC_AUTH
    assert produce(alice, "az-secret") == NONE
    # Metadata: DESCRIBE, implied by READ/WRITE/DELETE/ALTER (not by ALTER_CONFIGS); never reveals existence.
    assert metadata(alice, ["az-read", "az-write", "az-alter", "az-del", "az-cfg", "az-missing"]) == {
        "az-read": NONE, "az-write": NONE, "az-alter": NONE, "az-del": NONE, "az-cfg": TOPIC_AUTH,
        "az-missing": TOPIC_AUTH}
    assert metadata(bob, ["az-read"]) == {"az-read": TOPIC_AUTH}
    visible = {t for t in metadata(alice, None) if t.startswith("az-")}
    assert visible == {"az-write", "az-read", "az-alter", "az-del", "az-recs", "az-secret"}
    assert not [t for t in metadata(bob, None) if t.startswith("az-")]
    # Auto-creation through Metadata needs CREATE.
    assert metadata(bob, ["az-new-auto"], auto_create=True) == {"az-new-auto": TOPIC_AUTH}
    # ListOffsets: DESCRIBE.
    assert list_offsets(alice, "az-read") == NONE
    assert list_offsets(bob, "az-read") == TOPIC_AUTH
    assert list_offsets(alice, "az-cfg") == TOPIC_AUTH
    # CreateTopics: CREATE on the cluster or the topic (prefixed here).
    assert create_topics(alice, "az-new-one") == {"az-new-one": NONE}
    assert create_topics(bob, "az-new-two") == {"az-new-two": TOPIC_AUTH}
    assert create_topics(alice, "az-other") == {"az-other": TOPIC_AUTH}
    # DeleteTopics: DELETE; a missing topic is UNKNOWN_TOPIC_OR_PARTITION only to a caller that may describe it.
    assert delete_topics(bob, "az-del") == {"az-del": TOPIC_AUTH}
    assert delete_topics(bob, "az-nothing") == {"az-nothing": TOPIC_AUTH}
    assert delete_topics(alice, "az-ghost") == {"az-ghost": UNKNOWN_TOPIC_OR_PARTITION}
    assert delete_topics(alice, "az-del") == {"az-del": NONE}
    # DescribeConfigs / IncrementalAlterConfigs: DESCRIBE_CONFIGS (implied by ALTER_CONFIGS) / ALTER_CONFIGS;
    # the broker resource needs them on the cluster.
    assert describe_configs(alice, 2, "az-cfg") == NONE
    assert describe_configs(bob, 2, "az-cfg") == TOPIC_AUTH
    assert describe_configs(alice, 2, "az-read") == TOPIC_AUTH
    assert describe_configs(alice, 4, "1") == CLUSTER_AUTH
    assert describe_configs(admin, 4, "1") == NONE
    assert alter_config(alice, "az-cfg") == NONE
    assert alter_config(bob, "az-cfg") == TOPIC_AUTH
    # CreatePartitions: ALTER.
    assert create_partitions(bob, "az-alter", 2) == TOPIC_AUTH
    assert create_partitions(alice, "az-alter", 2) == NONE
    # DeleteRecords: DELETE.
    assert delete_records(bob, "az-recs") == TOPIC_AUTH
    assert delete_records(alice, "az-recs") == NONE

    # Groups: FindCoordinator DESCRIBE (implied by READ), JoinGroup READ, OffsetCommit READ group and topic,
    # OffsetFetch DESCRIBE, DescribeGroups DESCRIBE, ListGroups filtered, DeleteGroups DELETE.
    assert find_coordinator(alice, "g-alice-1") == NONE
    assert find_coordinator(bob, "g-alice-1") == GROUP_AUTH
    assert join_group(alice, "g-alice-1") == MEMBER_ID_REQUIRED
    assert join_group(bob, "g-alice-1") == GROUP_AUTH
    assert offset_commit(alice, "g-alice-1", "az-read") == NONE
    assert offset_commit(alice, "g-alice-1", "az-write") == TOPIC_AUTH
    assert offset_commit(bob, "g-alice-1", "az-read") == GROUP_AUTH
    assert offset_fetch(alice, "g-alice-1", "az-read") == NONE
    assert offset_fetch(alice, "g-alice-1", "az-write") == NONE, "WRITE implies DESCRIBE"
    assert offset_fetch(alice, "g-alice-1", "az-cfg") == TOPIC_AUTH
    assert offset_fetch(bob, "g-alice-1", "az-read") == GROUP_AUTH
    assert describe_group(alice, "g-alice-1") == NONE
    assert describe_group(bob, "g-alice-1") == GROUP_AUTH
    assert "g-alice-1" in list_groups(alice)
    assert "g-alice-1" not in list_groups(bob)
    assert "g-alice-1" in list_groups(admin)
    assert offset_commit(alice, "g-alice-del", "az-read") == NONE
    assert delete_group(bob, "g-alice-del") == GROUP_AUTH
    assert delete_group(alice, "g-alice-1") == GROUP_AUTH
    assert delete_group(alice, "g-alice-del") == NONE

    # Transactional and idempotent producers: WRITE on the transactional id; without one, WRITE on some topic.
    assert find_coordinator(alice, "tx-alice", key_type=1) == NONE
    assert find_coordinator(bob, "tx-alice", key_type=1) == TXN_AUTH
    assert init_producer_id(alice, "tx-alice") == NONE
    assert init_producer_id(bob, "tx-alice") == TXN_AUTH
    assert init_producer_id(alice, None) == NONE
    assert init_producer_id(bob, None) == CLUSTER_AUTH

    # Cluster-level: DescribeAcls DESCRIBE, CreateAcls ALTER, ElectLeaders ALTER; DescribeCluster is open.
    assert describe_acls(bob).error_code == CLUSTER_AUTH
    assert create_acls(bob, acl(TOPIC, "x", LITERAL, "User:bob", READ)) == [CLUSTER_AUTH]
    r = bob.call(ElectLeadersRequest[2](election_type=0, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic="az-read", partitions=[0])], timeout_ms=10000))
    assert r.error_code == CLUSTER_AUTH
    r = bob.call(DescribeClusterRequest[1](include_cluster_authorized_operations=False, endpoint_type=1))
    assert r.error_code == NONE


def test_describe_and_delete_acls_follow_kafkas_filters(authz, users):
    admin = users["admin"]
    assert create_acls(admin, acl(TOPIC, "flt-", PREFIXED, "User:carol", READ),
                       acl(TOPIC, "flt-x", LITERAL, "User:carol", WRITE, host="10.0.0.1"),
                       acl(TOPIC, "*", LITERAL, "User:carol", DESCRIBE)) == [NONE] * 3
    wait_for_acls(admin, "User:carol", 3)
    r = describe_acls(admin, resource_type_filter=TOPIC, resource_name_filter="flt-x", pattern_type_filter=MATCH,
                      principal_filter="User:carol")
    assert r.error_code == NONE
    got = sorted((res.resource_name, res.pattern_type, a.operation, a.host) for res in r.resources for a in res.acls)
    assert got == [("*", LITERAL, DESCRIBE, "*"), ("flt-", PREFIXED, READ, "*"), ("flt-x", LITERAL, WRITE, "10.0.0.1")]
    r = describe_acls(admin, resource_type_filter=TOPIC, resource_name_filter="flt-x", pattern_type_filter=LITERAL)
    assert [(res.resource_name, len(res.acls)) for res in r.resources] == [("flt-x", 1)]
    # Creation errors, as Kafka answers them: per ACL for bad names, principals and unknown codes ...
    assert create_acls(admin,
                       acl(CLUSTER, "my-cluster", LITERAL, "User:carol", ALTER),
                       acl(TOPIC, "", LITERAL, "User:carol", READ),
                       acl(TOPIC, "flt-y", LITERAL, "carol", READ),
                       acl(99, "flt-y", LITERAL, "User:carol", READ),
                       acl(TOPIC, "flt-y", 99, "User:carol", READ),
                       acl(TOPIC, "flt-y", LITERAL, "User:carol", 99)) == [INVALID_REQUEST] * 6
    # ... and for the whole request when one names ANY or MATCH where a concrete value is needed.
    for bad in (acl(TOPIC, "flt-y", MATCH, "User:carol", READ), acl(TOPIC, "flt-y", ANY, "User:carol", READ),
                acl(ANY, "flt-y", LITERAL, "User:carol", READ), acl(TOPIC, "flt-y", LITERAL, "User:carol", ANY),
                acl(TOPIC, "flt-y", LITERAL, "User:carol", READ, perm=ANY)):
        assert create_acls(admin, acl(TOPIC, "flt-z", LITERAL, "User:carol", READ), bad) == [-1, -1]
    assert describe_acls(admin, resource_type_filter=TOPIC, resource_name_filter="flt-z").resources == []
    R = DeleteAclsRequest
    r = admin.call(R[3](filters=[R.DeleteAclsFilter(
        resource_type_filter=TOPIC, resource_name_filter=None, pattern_type_filter=ANY, principal_filter="User:carol",
        host_filter=None, operation=ANY, permission_type=ANY)]))
    assert r.filter_results[0].error_code == NONE
    assert len(r.filter_results[0].matching_acls) == 3
    assert describe_acls(admin, principal_filter="User:carol").resources == []


def acl_tool(authz, *args):
    d = authz.dir / "admin.properties"
    d.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                 'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required '
                 'username="admin" password="admin-secret";\n')
    proc = subprocess.run(["java", "-Xmx256m", "-cp", kafka_classpath(), "org.apache.kafka.tools.AclCommand",
                           "--bootstrap-server", f"127.0.0.1:{authz.port}", "--command-config", str(d), *args],
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"kafka-acls {' '.join(args)} failed:\n{out[-3000:]}"
    return proc.stdout


def test_kafka_acls_tool_adds_lists_and_removes(authz, users):
    acl_tool(authz, "--add", "--allow-principal", "User:dave", "--operation", "Read", "--operation", "Describe",
             "--topic", "tool-topic", "--group", "tool-group")
    acl_tool(authz, "--add", "--deny-principal", "User:dave", "--operation", "Write", "--topic", "tool-",
             "--resource-pattern-type", "prefixed")
    out = acl_tool(authz, "--list", "--principal", "User:dave")
    assert "name=tool-topic, patternType=LITERAL" in out, out
    assert "name=tool-group, patternType=LITERAL" in out, out
    assert "name=tool-, patternType=PREFIXED" in out, out
    assert "operation=READ, permissionType=ALLOW" in out and "operation=WRITE, permissionType=DENY" in out, out
    acl_tool(authz, "--remove", "--force", "--allow-principal", "User:dave", "--operation", "Read",
             "--operation", "Describe", "--topic", "tool-topic", "--group", "tool-group")
    out = acl_tool(authz, "--list", "--principal", "User:dave")
    assert "tool-topic" not in out and "tool-group" not in out and "name=tool-, patternType=PREFIXED" in out, out


def test_acls_survive_kill_9(authz, users):
    admin = users["admin"]
    assert create_acls(admin, acl(TOPIC, "kill-topic", LITERAL, "User:erin", WRITE)) == [NONE]
    wait_for_acls(admin, "User:erin", 1)
    before = describe_acls(admin, principal_filter="User:erin").resources
    assert len(before) == 1
    authz.kill9()
    authz.start()
    for c in users.values():
        c.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            fresh = {u: Session(authz, u) for u in ("admin", "alice", "bob")}
            break
        except (OSError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    users.update(fresh)
    after = describe_acls(fresh["admin"], principal_filter="User:erin").resources
    assert [(r.resource_name, [(a.operation, a.permission_type) for a in r.acls]) for r in after] == \
        [("kill-topic", [(WRITE, ALLOW)])]
    # And they still decide: alice's ACLs from the matrix are there.
    assert produce(fresh["bob"], "az-write") == TOPIC_AUTH
    deadline = time.monotonic() + 30
    while (code := list_offsets(fresh["alice"], "az-read")) == 6 and time.monotonic() < deadline:
        time.sleep(0.3)  # NOT_LEADER_OR_FOLLOWER while the restarted broker loads the partition
    assert code == NONE


def test_unknown_zero_acl_codes_close_the_connection(authz):
    s = Session(authz, "admin")
    s.send(CreateAclsRequest[3](creations=[acl(0, "t", LITERAL, "User:x", READ)]))
    assert s.closed(), "Kafka's parser refuses UNKNOWN (0) codes"
    s.close()
    s = Session(authz, "admin")
    R = DeleteAclsRequest
    s.send(R[3](filters=[R.DeleteAclsFilter(resource_type_filter=0, resource_name_filter=None, pattern_type_filter=1,
                                            principal_filter=None, host_filter=None, operation=1, permission_type=1)]))
    assert s.closed()
    s.close()
