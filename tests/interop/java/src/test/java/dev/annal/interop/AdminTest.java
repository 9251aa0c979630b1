package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.errors.InvalidPartitionsException;
import org.apache.kafka.common.errors.InvalidReplicationFactorException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.errors.UnknownTopicOrPartitionException;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Topic administration with the unchanged Java Admin client. */
class AdminTest {
    static Broker broker;
    static Admin admin;

    @BeforeAll
    static void startBroker() throws Exception {
        broker = Broker.create();
        admin = Clients.admin(broker);
    }

    @AfterAll
    static void stopBroker() throws Exception {
        if (admin != null) {
            admin.close();
        }
        if (broker != null) {
            broker.close();
        }
    }

    static Config topicConfig(String topic) throws Exception {
        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        return admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
    }

    interface Call {
        void run() throws Exception;
    }

    static Throwable failure(Call call) {
        ExecutionException e = assertThrows(ExecutionException.class, call::run);
        return e.getCause();
    }

    @Test
    void createDescribeAlterDelete() throws Exception {
        String topic = Clients.uniqueTopic("admin-cycle");
        admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1)
                .configs(Map.of("retention.ms", "3600000", "cleanup.policy", "delete"))))
                .all().get(30, TimeUnit.SECONDS);
        Clients.waitForLeaders(admin, topic, 3);

        assertTrue(admin.listTopics().names().get().contains(topic));
        TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
        assertEquals(3, d.partitions().size());
        assertFalse(d.isInternal());
        assertNotNull(d.topicId());
        Collection<Node> nodes = admin.describeCluster().nodes().get();
        for (TopicPartitionInfo p : d.partitions()) {
            assertTrue(nodes.contains(p.leader()), "leader is a cluster node");
            assertEquals(List.of(p.leader()), p.replicas());
            assertEquals(List.of(p.leader()), p.isr());
        }

        Config c = topicConfig(topic);
        assertEquals("3600000", c.get("retention.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("retention.ms").source());
        assertEquals("delete", c.get("cleanup.policy").value());
        assertEquals("1073741824", c.get("segment.bytes").value());
        assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("segment.bytes").source());
        assertEquals("1048588", c.get("max.message.bytes").value());

        ConfigResource r = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "7200000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("segment.ms", "600000"), AlterConfigOp.OpType.SET),
                new AlterConfigOp(new ConfigEntry("cleanup.policy", ""), AlterConfigOp.OpType.DELETE))))
                .all().get(30, TimeUnit.SECONDS);
        // Kafka applies config changes asynchronously (through its metadata log): wait for them to show.
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (!"600000".equals(topicConfig(topic).get("segment.ms").value())) {
            assertTrue(System.nanoTime() < deadline, "segment.ms not altered within 30 s");
            Thread.sleep(100);
        }
        c = topicConfig(topic);
        assertEquals("7200000", c.get("retention.ms").value());
        assertEquals("600000", c.get("segment.ms").value());
        assertEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("segment.ms").source());
        assertNotEquals(ConfigEntry.ConfigSource.DYNAMIC_TOPIC_CONFIG, c.get("cleanup.policy").source());

        // An invalid value is refused and changes nothing.
        Throwable bad = failure(() -> admin.incrementalAlterConfigs(Map.of(r, List.of(
                new AlterConfigOp(new ConfigEntry("retention.ms", "later"), AlterConfigOp.OpType.SET))))
                .all().get(30, TimeUnit.SECONDS));
        assertInstanceOf(InvalidConfigurationException.class, bad);
        assertEquals("7200000", topicConfig(topic).get("retention.ms").value());

        admin.deleteTopics(List.of(topic)).all().get(30, TimeUnit.SECONDS);
        deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (admin.listTopics().names().get().contains(topic)) {
            assertTrue(System.nanoTime() < deadline, "topic still listed 30 s after delete");
            Thread.sleep(100);
        }
    }

    @Test
    void createTopicErrors() throws Exception {
        String topic = Clients.uniqueTopic("admin-errors");
        assertInstanceOf(InvalidReplicationFactorException.class, failure(() ->
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 2))).all().get(30, TimeUnit.SECONDS)));
        assertInstanceOf(InvalidConfigurationException.class, failure(() ->
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1).configs(Map.of("no.such.config", "1"))))
                        .all().get(30, TimeUnit.SECONDS)));
        assertInstanceOf(InvalidTopicException.class, failure(() ->
                admin.createTopics(List.of(new NewTopic("bad/name", 1, (short) 1))).all().get(30, TimeUnit.SECONDS)));

        admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)), new CreateTopicsOptions().validateOnly(true))
                .all().get(30, TimeUnit.SECONDS);
        assertFalse(admin.listTopics().names().get().contains(topic), "validateOnly must not create the topic");

        // Broker defaults: partitions and replication factor left to the broker.
        admin.createTopics(List.of(new NewTopic(topic, Optional.empty(), Optional.empty())))
                .all().get(30, TimeUnit.SECONDS);
        Clients.waitForLeaders(admin, topic, 1);
        assertInstanceOf(TopicExistsException.class, failure(() ->
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get(30, TimeUnit.SECONDS)));
        assertInstanceOf(UnknownTopicOrPartitionException.class, failure(() ->
                admin.deleteTopics(List.of(topic + "-missing")).all().get(30, TimeUnit.SECONDS)));
    }

    @Test
    void createPartitions() throws Exception {
        String topic = Clients.uniqueTopic("admin-partitions");
        Clients.createTopic(broker, topic, 2, Map.of());
        admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(5))).all().get(30, TimeUnit.SECONDS);
        Clients.waitForLeaders(admin, topic, 5);
        assertInstanceOf(InvalidPartitionsException.class, failure(() ->
                admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all().get(30, TimeUnit.SECONDS)));
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of())) {
            assertEquals(0, p.send(new ProducerRecord<>(topic, 4, null, Clients.bytes("p4"))).get().offset());
        }
        assertEquals("p4", Clients.str(Clients.consume(broker, topic, 4, -1, 1).get(0).value()));
    }

    @Test
    void describeClusterAndBrokerConfigs() throws Exception {
        DescribeClusterResult cluster = admin.describeCluster();
        Collection<Node> nodes = cluster.nodes().get(30, TimeUnit.SECONDS);
        assertEquals(1, nodes.size());
        Node node = nodes.iterator().next();
        assertEquals(broker.host(), node.host());
        assertEquals(broker.port(), node.port());
        assertNotNull(cluster.clusterId().get());
        assertFalse(cluster.clusterId().get().isEmpty());
        assertNotNull(cluster.controller().get());

        ConfigResource r = new ConfigResource(ConfigResource.Type.BROKER, Integer.toString(node.id()));
        Config c = admin.describeConfigs(List.of(r)).all().get(30, TimeUnit.SECONDS).get(r);
        assertEquals("1048588", c.get("message.max.bytes").value());
        assertEquals("true", c.get("auto.create.topics.enable").value());
        assertEquals("1", c.get("num.partitions").value());
        assertTrue(c.get("num.partitions").isDefault());
        assertEquals(ConfigEntry.ConfigSource.DEFAULT_CONFIG, c.get("num.partitions").source());
    }
}
