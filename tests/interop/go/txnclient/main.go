// txnclient drives franz-go's transactional producer against a broker for tests/interop/test_transactions.py.
//
// Usage:
//
//	txnclient commit-abort <bootstrap> <txn-id> <topic-a> <topic-b>
//	    three transactions over partition 0 of both topics: committed "c1-0".."c1-4", aborted "aborted-0".."aborted-4"
//	    (flushed before the abort, so they are in the log), committed "c2-0".
//	txnclient zombie <bootstrap> <txn-id> <topic>
//	    producer A commits "a-0"; producer B of the same id commits "b-0", which fences A; A's next transaction
//	    ("zombie") must fail; B commits "b-1". Prints "fenced: <error>" for A's failure.
//
// Every step's outcome is printed on its own line; the exit status is 0 only if every expectation held.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func client(bootstrap, id string) *kgo.Client {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID(id),
		kgo.TransactionTimeout(60*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if err != nil {
		fail("client: %v", err)
	}
	return cl
}

func fail(format string, args ...any) {
	fmt.Printf("FAIL "+format+"\n", args...)
	os.Exit(1)
}

// transaction produces values to partition 0 of each topic and ends the transaction with commit (or abort after a
// flush, so the records are in the log).
func transaction(ctx context.Context, cl *kgo.Client, commit bool, topics []string, values []string) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	for _, v := range values {
		for _, t := range topics {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: t, Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
				_ = cl.EndTransaction(ctx, kgo.TryAbort)
				return fmt.Errorf("produce %s: %w", v, err)
			}
		}
	}
	end := kgo.TryCommit
	if !commit {
		end = kgo.TryAbort
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		return fmt.Errorf("end (commit=%v): %w", commit, err)
	}
	return nil
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func main() {
	if len(os.Args) < 4 {
		fail("usage: txnclient commit-abort|zombie <bootstrap> <txn-id> <topics...>")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	mode, bootstrap, id := os.Args[1], os.Args[2], os.Args[3]
	switch mode {
	case "commit-abort":
		if len(os.Args) != 6 {
			fail("commit-abort needs two topics")
		}
		topics := os.Args[4:6]
		cl := client(bootstrap, id)
		defer cl.Close()
		steps := []struct {
			commit bool
			values []string
		}{{true, seq("c1", 5)}, {false, seq("aborted", 5)}, {true, seq("c2", 1)}}
		for i, s := range steps {
			if err := transaction(ctx, cl, s.commit, topics, s.values); err != nil {
				fail("transaction %d: %v", i+1, err)
			}
			fmt.Printf("ok transaction %d commit=%v\n", i+1, s.commit)
		}
	case "zombie":
		if len(os.Args) != 5 {
			fail("zombie needs one topic")
		}
		topics := os.Args[4:5]
		a := client(bootstrap, id)
		defer a.Close()
		if err := transaction(ctx, a, true, topics, []string{"a-0"}); err != nil {
			fail("A's first transaction: %v", err)
		}
		b := client(bootstrap, id)
		defer b.Close()
		if err := transaction(ctx, b, true, topics, []string{"b-0"}); err != nil {
			fail("B's first transaction: %v", err)
		}
		err := transaction(ctx, a, true, topics, []string{"zombie"})
		if err == nil {
			fail("the zombie's transaction committed")
		}
		fmt.Printf("fenced: %v\n", err)
		if err := transaction(ctx, b, true, topics, []string{"b-1"}); err != nil {
			fail("B's second transaction: %v", err)
		}
		fmt.Println("ok current producer committed after the fence")
	default:
		fail("unknown mode %q", mode)
	}
}
