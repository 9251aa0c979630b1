package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.QuorumInfo;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Issue 9's proof with Java kafka-clients 4.x: a 3-node cluster (tests/interop/cluster.py's command line, so the
 * nodes, their server.properties and the Annal/Kafka choice are the Python harness's), clients bootstrapped to one
 * node. The last test kills the active controller, so the order is fixed.
 */
@Tag("cluster")
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ClusterTest {
    private static Path dir;
    private static String clusterId;
    private static final Map<Integer, Broker> nodes = new TreeMap<>();
    private static final Map<Integer, Long> pids = new HashMap<>();

    private static Path harness() {
        return Path.of(System.getProperty("interop.repo", "../../..")).resolve("tests/interop/cluster.py");
    }

    private static List<String> runHarness(String... args) throws Exception {
        List<String> cmd = new ArrayList<>(List.of("python3", harness().toString()));
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        List<String> out = new ArrayList<>();
        try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; (line = r.readLine()) != null; ) {
                out.add(line);
            }
        }
        if (!p.waitFor(300, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IllegalStateException(String.join(" ", cmd) + " failed: " + out);
        }
        return out;
    }

    @BeforeAll
    static void startCluster() throws Exception {
        dir = Files.createTempDirectory("annal-interop-java-cluster-");
        Files.delete(dir); // the harness creates it
        for (String line : runHarness("start", dir.toString(), "--nodes", "3")) {
            if (line.startsWith("cluster_id=")) {
                clusterId = line.substring("cluster_id=".length());
            } else if (line.startsWith("node=")) {
                String[] f = line.substring("node=".length()).split(" ");
                int id = Integer.parseInt(f[0]);
                nodes.put(id, new Broker.External(f[1]));
                pids.put(id, Long.parseLong(f[2]));
            }
        }
        assertEquals(Set.of(1, 2, 3), nodes.keySet(), "harness output");
    }

    @AfterAll
    static void stopCluster() throws Exception {
        if (dir != null && Files.exists(dir.resolve("cluster.json"))) {
            runHarness("stop", dir.toString(), "--kill");
        }
        if (dir != null && !"1".equals(System.getenv("INTEROP_KEEP"))) {
            Broker.deleteTree(dir);
        }
    }

    private static Broker node(int id) {
        return nodes.get(id);
    }

    private static QuorumInfo quorum(Admin admin) throws Exception {
        return admin.describeMetadataQuorum().quorumInfo().get(30, TimeUnit.SECONDS);
    }

    @Test
    @Order(1)
    void formationEveryNodeSeesTheWholeCluster() throws Exception {
        Integer leader = null;
        for (int id : nodes.keySet()) {
            try (Admin admin = Clients.admin(node(id))) {
                DescribeClusterResult dc = admin.describeCluster();
                assertEquals(clusterId, dc.clusterId().get(30, TimeUnit.SECONDS));
                Map<Integer, String> seen = dc.nodes().get(30, TimeUnit.SECONDS).stream()
                        .collect(Collectors.toMap(Node::id, n -> n.host() + ":" + n.port()));
                Map<Integer, String> want = new TreeMap<>();
                nodes.forEach((i, b) -> want.put(i, b.bootstrap()));
                assertEquals(want, new TreeMap<>(seen), "DescribeCluster via node " + id);
                // KRaft: DescribeCluster's controller is a random live broker; DescribeQuorum names the real one.
                assertTrue(nodes.containsKey(dc.controller().get(30, TimeUnit.SECONDS).id()));
                QuorumInfo q = quorum(admin);
                assertEquals(Set.of(1, 2, 3),
                        q.voters().stream().map(QuorumInfo.ReplicaState::replicaId).collect(Collectors.toSet()));
                if (leader == null) {
                    leader = q.leaderId();
                }
                assertEquals(leader, q.leaderId(), "quorum leader via node " + id);
            }
        }
        assertTrue(nodes.containsKey(leader));
    }

    @Test
    @Order(2)
    void topicCreatedThroughOneNodeProducedThroughAnotherConsumedThroughTheThird() throws Exception {
        String topic = Clients.uniqueTopic("cluster");
        int partitions = 6;
        int perPartition = 50;
        try (Admin admin = Clients.admin(node(1))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 3))).all().get(60, TimeUnit.SECONDS);
            Clients.waitForLeaders(admin, topic, partitions);
        }
        Map<Integer, String> view1 = placement(node(1), topic);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(15);
        // Node 3 learns of the topic when it applies the committed metadata, a moment after node 1 answered.
        while (!view1.equals(placementOrNull(node(3), topic)) && System.nanoTime() < deadline) {
            Thread.sleep(200);
        }
        assertEquals(view1, placement(node(3), topic), "placement seen through node 3 vs node 1");

        // acks=1: until Annal replicates (issue 10) a new partition's ISR is its leader alone.
        Map<Integer, List<String>> sent = new TreeMap<>();
        try (KafkaProducer<byte[], byte[]> producer = Clients.plainProducer(node(2),
                Map.of(ProducerConfig.ACKS_CONFIG, "1", ProducerConfig.LINGER_MS_CONFIG, 5))) {
            List<java.util.concurrent.Future<RecordMetadata>> acks = new ArrayList<>();
            for (int p = 0; p < partitions; p++) {
                for (int i = 0; i < perPartition; i++) {
                    String v = "java-p" + p + "-" + i;
                    sent.computeIfAbsent(p, k -> new ArrayList<>()).add(v);
                    acks.add(producer.send(new ProducerRecord<>(topic, p, null, v.getBytes(StandardCharsets.UTF_8))));
                }
            }
            producer.flush();
            for (var f : acks) {
                f.get(30, TimeUnit.SECONDS);
            }
        }
        for (int p = 0; p < partitions; p++) {
            List<ConsumerRecord<byte[], byte[]>> got = Clients.consume(node(3), topic, p, 0, perPartition);
            List<String> values = got.stream().map(r -> new String(r.value(), StandardCharsets.UTF_8)).toList();
            assertEquals(sent.get(p), values, "partition " + p + " via node 3");
            for (int i = 0; i < got.size(); i++) {
                assertEquals(i, got.get(i).offset());
            }
        }
    }

    /** The placement as {@code via} sees it, or null while it does not know the topic yet. */
    private static Map<Integer, String> placementOrNull(Broker via, String topic) throws Exception {
        try {
            return placement(via, topic);
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof org.apache.kafka.common.errors.UnknownTopicOrPartitionException) {
                return null;
            }
            throw e;
        }
    }

    private static Map<Integer, String> placement(Broker via, String topic) throws Exception {
        try (Admin admin = Clients.admin(via)) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get(30, TimeUnit.SECONDS)
                    .get(topic);
            Map<Integer, String> out = new TreeMap<>();
            for (TopicPartitionInfo p : d.partitions()) {
                out.put(p.partition(), p.leader().id() + " " + p.replicas().stream().map(Node::id).toList());
            }
            return out;
        }
    }

    @Test
    @Order(3)
    void controllerKill9ElectsANewControllerAndAdminWorks() throws Exception {
        int old;
        try (Admin admin = Clients.admin(node(1))) {
            old = quorum(admin).leaderId();
        }
        ProcessHandle victim = ProcessHandle.of(pids.get(old)).orElseThrow();
        victim.destroyForcibly(); // SIGKILL
        victim.onExit().get(30, TimeUnit.SECONDS);
        int survivor = nodes.keySet().stream().filter(id -> id != old).findFirst().orElseThrow();
        try (Admin admin = Clients.admin(node(survivor))) {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            int leader = -1;
            while (System.nanoTime() < deadline) {
                try {
                    leader = quorum(admin).leaderId();
                    if (leader >= 0 && leader != old) {
                        break;
                    }
                } catch (Exception e) {
                    // the forwarded request may fail while the quorum elects
                }
                Thread.sleep(200);
            }
            assertNotEquals(old, leader, "a new active controller after kill -9 of " + old);
            assertTrue(nodes.containsKey(leader));
            // Two brokers live: RF 2 (waiting for the dead one's lease to lapse first, so none is placed on it).
            deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (admin.describeCluster().nodes().get(30, TimeUnit.SECONDS).stream().anyMatch(n -> n.id() == old)
                    && System.nanoTime() < deadline) {
                Thread.sleep(200);
            }
            String topic = Clients.uniqueTopic("after-controller-kill");
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 2))).all().get(60, TimeUnit.SECONDS);
            Clients.waitForLeaders(admin, topic, 3);
            for (TopicPartitionInfo p : admin.describeTopics(List.of(topic)).allTopicNames()
                    .get(30, TimeUnit.SECONDS).get(topic).partitions()) {
                assertTrue(p.replicas().stream().noneMatch(n -> n.id() == old), "replica on the dead node: " + p);
            }
        }
    }
}
