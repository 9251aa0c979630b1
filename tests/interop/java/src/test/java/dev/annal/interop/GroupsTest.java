package dev.annal.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupState;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Consumer groups with the Java client (issue 4), with the classic protocol (cooperative-sticky assignor) and the
 * KIP-848 consumer protocol. Tagged "groups": excluded unless run with -Dinterop.excludedGroups=none
 * (run.sh does that when INTEROP_GROUPS=1).
 */
@Tag("groups")
class GroupsTest {
    static Broker broker;

    @BeforeAll
    static void startBroker() throws Exception {
        broker = Broker.create();
    }

    @AfterAll
    static void stopBroker() throws Exception {
        if (broker != null) {
            broker.close();
        }
    }

    /** A group member; records what the rebalance listener revoked and what it read. */
    static final class Member implements AutoCloseable {
        final KafkaConsumer<byte[], byte[]> consumer;
        final Set<Integer> revoked = new HashSet<>();
        final List<ConsumerRecord<byte[], byte[]>> records = new ArrayList<>();

        Member(String topic, String group, String protocol) {
            Map<String, Object> c = new HashMap<>();
            c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
            if (protocol.equals("consumer")) {
                c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
            } else {
                c.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "classic");
                c.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                        "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");
                c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, 10000);
                c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, 500);
            }
            consumer = Clients.consumer(broker, c);
            consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    partitions.forEach(tp -> revoked.add(tp.partition()));
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {}
            });
        }

        void poll() {
            consumer.poll(Duration.ofMillis(50)).forEach(records::add);
        }

        Set<Integer> owned() {
            Set<Integer> out = new HashSet<>();
            consumer.assignment().forEach(tp -> out.add(tp.partition()));
            return out;
        }

        @Override
        public void close() {
            consumer.close(Duration.ofSeconds(5));
        }
    }

    static void drive(List<Member> members, BooleanSupplier done, String what) {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (System.nanoTime() < deadline) {
            members.forEach(Member::poll);
            if (done.getAsBoolean()) {
                long settle = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(1500);
                while (System.nanoTime() < settle) {
                    members.forEach(Member::poll);
                }
                if (done.getAsBoolean()) {
                    return;
                }
            }
        }
        List<Set<Integer>> owned = members.stream().map(Member::owned).toList();
        throw new AssertionError("timed out waiting for: " + what + "; owned " + owned);
    }

    static boolean cover(List<Member> members, int n) {
        Set<Integer> union = new HashSet<>();
        int total = 0;
        for (Member m : members) {
            Set<Integer> o = m.owned();
            union.addAll(o);
            total += o.size();
        }
        return union.size() == n && total == n;
    }

    static String group() {
        return "itj-group-" + UUID.randomUUID().toString().substring(0, 8);
    }

    @ParameterizedTest(name = "group.protocol={0}")
    @ValueSource(strings = {"classic", "consumer"})
    void threeMembersShareSixPartitionsAndAFourthMovesOnlyWhatItTakes(String protocol) throws Exception {
        String topic = Clients.uniqueTopic("groups-" + protocol);
        Clients.createTopic(broker, topic, 6, Map.of());
        String group = group();
        List<Member> three = new ArrayList<>();
        List<Member> all = new ArrayList<>();
        try {
            for (int i = 0; i < 3; i++) {
                three.add(new Member(topic, group, protocol));
            }
            all.addAll(three);
            drive(three, () -> cover(three, 6) && three.stream().allMatch(m -> m.owned().size() == 2),
                    "three members own two partitions each");
            try (Admin admin = Clients.admin(broker)) {
                ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group)).describedGroups()
                        .get(group).get(30, TimeUnit.SECONDS);
                assertEquals(GroupState.STABLE, d.groupState());
                assertEquals(3, d.members().size());
            }

            List<Set<Integer>> before = three.stream().map(Member::owned).toList();
            three.forEach(m -> m.revoked.clear());
            Member fourth = new Member(topic, group, protocol);
            all.add(fourth);
            drive(all, () -> cover(all, 6) && !fourth.owned().isEmpty()
                    && all.stream().allMatch(m -> !m.owned().isEmpty()), "four members share six partitions");
            Set<Integer> moved = fourth.owned();
            Set<Integer> revoked = new HashSet<>();
            three.forEach(m -> revoked.addAll(m.revoked));
            assertEquals(moved, revoked, "only the partitions that moved to the new member were revoked");
            for (int i = 0; i < 3; i++) {
                assertTrue(before.get(i).containsAll(three.get(i).owned()), "a member gained partitions");
            }

            // The new member leaves: its partitions go back to the other three.
            fourth.close();
            all.remove(fourth);
            drive(three, () -> cover(three, 6), "partitions of the member that left reassigned");
        } finally {
            for (Member m : all) {
                m.close();
            }
        }
    }

    @ParameterizedTest(name = "group.protocol={0}")
    @ValueSource(strings = {"classic", "consumer"})
    void uncommittedRecordsAreRedeliveredToTheNextMember(String protocol) throws Exception {
        String topic = Clients.uniqueTopic("at-least-once-" + protocol);
        Clients.createTopic(broker, topic, 1, Map.of());
        try (KafkaProducer<byte[], byte[]> p = Clients.plainProducer(broker, Map.of())) {
            for (int i = 0; i < 20; i++) {
                p.send(new ProducerRecord<>(topic, 0, null, Clients.bytes("r" + i)));
            }
            p.flush();
        }
        String group = group();
        TopicPartition tp = new TopicPartition(topic, 0);
        try (Member a = new Member(topic, group, protocol)) {
            drive(List.of(a), () -> a.records.size() == 20, "first member reads all 20");
            // Processed 20, committed 10, then gone.
            a.consumer.commitSync(Map.of(tp, new OffsetAndMetadata(10, "half-done")));
        }
        try (Member b = new Member(topic, group, protocol)) {
            drive(List.of(b), () -> b.records.size() == 10, "next member reads from the committed offset");
            assertEquals(10, b.records.get(0).offset());
            assertEquals("r10", Clients.str(b.records.get(0).value()));
            OffsetAndMetadata committed = b.consumer.committed(Set.of(tp)).get(tp);
            assertEquals(10, committed.offset());
            assertEquals("half-done", committed.metadata());
        }
    }
}
