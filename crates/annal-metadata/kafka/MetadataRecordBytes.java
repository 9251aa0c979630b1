// Prints Apache Kafka's own encoding of a few metadata records (hex), to compare with src/records/kafka_bytes.rs.
// Run: java -cp "$(KAFKA_CACHE=/tmp/k scripts/kafka/fetch.sh | xargs cat)" crates/annal-metadata/kafka/MetadataRecordBytes.java
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.*;
import org.apache.kafka.common.protocol.*;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import java.nio.ByteBuffer;
import java.util.*;

public class MetadataRecordBytes {
    static void dump(String label, ApiMessage m, short v) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ApiMessageAndVersion mv = new ApiMessageAndVersion(m, v);
        int size = MetadataRecordSerde.INSTANCE.recordSize(mv, cache);
        ByteBuffer buf = ByteBuffer.allocate(size);
        MetadataRecordSerde.INSTANCE.write(mv, cache, new ByteBufferAccessor(buf));
        StringBuilder sb = new StringBuilder();
        for (byte b : buf.array()) sb.append(String.format("%02x", b));
        System.out.println(label + " " + sb);
    }
    public static void main(String[] a) {
        Uuid topic = new Uuid(0x0123456789abcdefL, 0x1122334455667788L);
        dump("topic", new TopicRecord().setName("orders").setTopicId(topic), (short) 0);
        RegisterBrokerRecord.BrokerEndpointCollection eps = new RegisterBrokerRecord.BrokerEndpointCollection();
        eps.add(new RegisterBrokerRecord.BrokerEndpoint().setName("PLAINTEXT").setHost("127.0.0.1").setPort(9092).setSecurityProtocol((short) 0));
        RegisterBrokerRecord.BrokerFeatureCollection fs = new RegisterBrokerRecord.BrokerFeatureCollection();
        fs.add(new RegisterBrokerRecord.BrokerFeature().setName("metadata.version").setMinSupportedVersion((short) 7).setMaxSupportedVersion((short) 25));
        dump("register", new RegisterBrokerRecord().setBrokerId(2).setIncarnationId(new Uuid(1L, 2L)).setBrokerEpoch(42L)
            .setEndPoints(eps).setFeatures(fs).setRack("rack-a").setFenced(true).setInControlledShutdown(false), (short) 3);
        dump("partition", new PartitionRecord().setPartitionId(3).setTopicId(topic).setReplicas(Arrays.asList(1, 2, 3))
            .setIsr(Arrays.asList(1)).setRemovingReplicas(Collections.emptyList()).setAddingReplicas(Collections.emptyList())
            .setLeader(1).setLeaderEpoch(0).setPartitionEpoch(0), (short) 0);
        dump("change", new PartitionChangeRecord().setPartitionId(3).setTopicId(topic).setIsr(Arrays.asList(2, 3)).setLeader(2), (short) 0);
        // KIP-966: the ELR fields (tags 6 and 7) need version 2; with a leader recovery state (tag 5) and an empty ISR.
        dump("change_elr", new PartitionChangeRecord().setPartitionId(3).setTopicId(topic).setIsr(Collections.emptyList())
            .setLeader(-1).setEligibleLeaderReplicas(Arrays.asList(1, 2)).setLastKnownElr(Arrays.asList(1)), (short) 2);
        dump("change_unclean", new PartitionChangeRecord().setPartitionId(3).setTopicId(topic).setIsr(Arrays.asList(3))
            .setLeader(3).setLeaderRecoveryState((byte) 1).setEligibleLeaderReplicas(Collections.emptyList())
            .setLastKnownElr(Collections.emptyList()), (short) 2);
        dump("partition_elr", new PartitionRecord().setPartitionId(3).setTopicId(topic).setReplicas(Arrays.asList(1, 2, 3))
            .setIsr(Collections.emptyList()).setRemovingReplicas(Collections.emptyList()).setAddingReplicas(Collections.emptyList())
            .setLeader(-1).setLeaderEpoch(4).setPartitionEpoch(7).setDirectories(Collections.emptyList())
            .setEligibleLeaderReplicas(Arrays.asList(2)).setLastKnownElr(Arrays.asList(1)), (short) 2);
        dump("regchange", new BrokerRegistrationChangeRecord().setBrokerId(2).setBrokerEpoch(42L).setFenced((byte) 1).setInControlledShutdown((byte) 0), (short) 2);
        dump("config", new ConfigRecord().setResourceType((byte) 2).setResourceName("orders").setName("retention.ms").setValue("1000"), (short) 0);
        dump("pids", new ProducerIdsRecord().setBrokerId(2).setBrokerEpoch(42L).setNextProducerId(2000L), (short) 0);
        dump("fence", new FenceBrokerRecord().setId(2).setEpoch(42L), (short) 0);
        dump("feature", new FeatureLevelRecord().setName("metadata.version").setFeatureLevel((short) 25), (short) 0);
    }
}
