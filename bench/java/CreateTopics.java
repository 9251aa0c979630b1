// Creates several topics in one Admin call (one JVM instead of one kafka-topics run per topic):
//   java -cp <kafka classpath> bench/java/CreateTopics.java BOOTSTRAP PARTITIONS TOPIC...
// Exits non-zero, naming the topic and the broker's error, if any topic could not be created.
import java.util.*;
import org.apache.kafka.clients.admin.*;

public class CreateTopics {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: CreateTopics BOOTSTRAP PARTITIONS TOPIC...");
            System.exit(2);
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        int partitions = Integer.parseInt(args[1]);
        List<NewTopic> topics = new ArrayList<>();
        for (int i = 2; i < args.length; i++) topics.add(new NewTopic(args[i], partitions, (short) 1));
        int failed = 0;
        try (Admin admin = Admin.create(props)) {
            CreateTopicsResult result = admin.createTopics(topics);
            for (Map.Entry<String, org.apache.kafka.common.KafkaFuture<Void>> e : result.values().entrySet()) {
                try {
                    e.getValue().get();
                    System.out.println("Created topic " + e.getKey() + " (" + partitions + " partitions)");
                } catch (Exception ex) {
                    failed++;
                    System.out.println("FAILED to create topic " + e.getKey() + ": " + ex.getMessage());
                }
            }
        }
        System.exit(failed == 0 ? 0 : 1);
    }
}
