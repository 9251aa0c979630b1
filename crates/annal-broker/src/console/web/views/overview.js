// #/ : the cluster at a glance (brokers, controller, quorum, health, disk, partitions at risk).
import { get } from "../api.js";
import { errorBox, fmtBytes, fmtNum, h, link, markRendered, table } from "../dom.js";

export async function render(main) {
  main.append(h("h1", null, "Overview"));
  let o;
  try {
    o = await get("/v1/overview");
  } catch (e) {
    main.append(errorBox(e));
    return;
  }
  const risky = (n) => h("span", { class: n > 0 ? "bad" : "good" }, fmtNum(n));
  main.append(
    h("dl", { class: "facts", testid: "overview-facts" },
      fact("Cluster id", o.cluster_id, "cluster-id"),
      fact("This broker", o.this_broker),
      fact("Controller", o.controller_id, "controller"),
      fact("Ready", o.ready ? "yes" : "no", "ready"),
      fact("Version", o.version),
      fact("Topics", link("#/topics", fmtNum(o.topics)), "topic-count"),
      fact("Partitions", fmtNum(o.partitions)),
      fact("Under-replicated partitions", risky(o.under_replicated_partitions), "urp"),
      fact("Offline partitions", risky(o.offline_partitions), "offline"),
      fact("Consumer groups", link("#/groups", fmtNum(o.groups)), "group-count"),
      fact("Groups not OK", risky(o.groups_unhealthy), "groups-unhealthy")),
    h("h2", null, "Brokers"),
    table(
      [
        { title: "Node", cell: (b) => String(b.node_id) },
        { title: "Host", cell: (b) => `${b.host}:${b.port}` },
        { title: "Rack", cell: (b) => b.rack ?? "–" },
        { title: "Role", cell: (b) => (b.is_controller ? "controller" : "") },
      ],
      o.brokers || [],
      { testid: "brokers", rowTestid: "broker-row" },
    ),
  );
  if (o.quorum) {
    main.append(
      h("h2", null, "Metadata quorum"),
      h("p", null, `leader ${o.quorum.leader_id}, epoch ${o.quorum.leader_epoch}, high watermark ${o.quorum.high_watermark}`),
      table(
        [
          { title: "Voter", cell: (v) => String(v.node_id) },
          { title: "Log end offset", cell: (v) => fmtNum(v.log_end_offset) },
        ],
        o.quorum.voters || [],
        { testid: "quorum" },
      ),
    );
  }
  main.append(
    h("h2", null, "Disk"),
    table(
      [
        { title: "Path", cell: (d) => d.path },
        { title: "Used", cell: (d) => fmtBytes(d.used_bytes) },
        { title: "Free", cell: (d) => fmtBytes(d.free_bytes) },
        { title: "Total", cell: (d) => fmtBytes(d.total_bytes) },
      ],
      o.disk || [],
      { testid: "disk" },
    ),
  );
  markRendered("overview");
}

function fact(name, value, testid) {
  return [h("dt", null, name), h("dd", { testid }, value === null || value === undefined ? "–" : value)];
}
