use super::*;

fn service(spec: Value) -> Value {
    json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
}

fn messages(e: Errors) -> Vec<String> {
    e.0.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
}

#[test]
fn a_service_is_given_a_free_address_of_the_upper_band_and_its_families() {
    let net = ServiceNetwork::default();
    let mut held = Held::default();
    for _ in 0..200 {
        let mut s = service(json!({"type": "ClusterIP", "ports": [{"port": 80}]}));
        net.assign(None, &mut s, &held).unwrap();
        let ip: Ipv4Addr = s["spec"]["clusterIP"].as_str().unwrap().parse().unwrap();
        assert_eq!(s["spec"]["clusterIPs"], json!([ip.to_string()]));
        assert!(net.usable(ip), "{ip} outside {}", net.cidr());
        assert!(u32::from(ip) - u32::from(net.first()) >= 256, "{ip} in the lower band");
        assert!(held.ips.insert(ip), "{ip} given twice");
        assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
        assert_eq!(s["spec"]["ipFamilyPolicy"], json!("SingleStack"));
        assert!(s["spec"]["ports"][0].get("nodePort").is_none());
    }
}

#[test]
fn an_address_asked_for_is_given_once_and_only_from_the_network() {
    let net = ServiceNetwork::default();
    let mut held = Held::default();
    let mut s = service(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}));
    net.assign(None, &mut s, &held).unwrap();
    assert_eq!(s["spec"]["clusterIPs"], json!(["10.96.0.10"]));
    held.add(&s);

    let mut again = service(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]}));
    let e = net.assign(None, &mut again, &held).unwrap_err();
    assert_eq!(
        messages(e),
        ["spec.clusterIPs: Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP \
          10.96.0.10: provided IP is already allocated"]
    );

    for outside in ["10.0.0.5", "10.96.0.0", "10.111.255.255"] {
        let mut s = service(json!({"clusterIP": outside, "ports": [{"port": 53}]}));
        let e = net.assign(None, &mut s, &held).unwrap_err();
        assert_eq!(
            messages(e),
            [format!(
                "spec.clusterIPs: Invalid value: []string{{\"{outside}\"}}: failed to allocate IP \
                 {outside}: the provided IP ({outside}) is not in the valid range. The range of \
                 valid IPs is 10.96.0.0/12"
            )]
        );
    }
    // An update keeps what the Service holds.
    let old = s_with_ip("10.96.0.10");
    let mut new = s_with_ip("10.96.0.10");
    net.assign(Some(&old), &mut new, &held).unwrap();
}

fn s_with_ip(ip: &str) -> Value {
    service(json!({"clusterIP": ip, "clusterIPs": [ip], "ports": [{"port": 53}]}))
}

#[test]
fn headless_services_hold_no_address_and_selectorless_ones_prefer_both_families() {
    let net = ServiceNetwork::default();
    let held = Held::default();
    let mut with_selector =
        service(json!({"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"port": 5432}]}));
    net.assign(None, &mut with_selector, &held).unwrap();
    assert_eq!(with_selector["spec"]["clusterIPs"], json!(["None"]));
    assert_eq!(with_selector["spec"]["ipFamilyPolicy"], json!("SingleStack"));

    let mut selectorless = service(json!({"clusterIP": "None"}));
    net.assign(None, &mut selectorless, &held).unwrap();
    assert_eq!(selectorless["spec"]["ipFamilyPolicy"], json!("RequireDualStack"));
    assert_eq!(selectorless["spec"]["ipFamilies"], json!(["IPv4"]));

    let mut held_by = Held::default();
    held_by.add(&with_selector);
    assert!(held_by.ips.is_empty());
}

#[test]
fn a_single_stack_cluster_answers_the_dual_stack_fields() {
    let net = ServiceNetwork::default();
    let held = Held::default();
    let mut prefer = service(json!({"ipFamilyPolicy": "PreferDualStack", "ports": [{"port": 80}]}));
    net.assign(None, &mut prefer, &held).unwrap();
    assert_eq!(prefer["spec"]["ipFamilyPolicy"], json!("PreferDualStack"));
    assert_eq!(prefer["spec"]["ipFamilies"], json!(["IPv4"]));

    let mut require =
        service(json!({"ipFamilyPolicy": "RequireDualStack", "ports": [{"port": 80}]}));
    assert_eq!(
        messages(net.assign(None, &mut require, &held).unwrap_err()),
        ["spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not \
          configured for dual-stack services"]
    );
    let mut v6 = service(json!({"ipFamilies": ["IPv6"], "ports": [{"port": 80}]}));
    assert_eq!(
        messages(net.assign(None, &mut v6, &held).unwrap_err()),
        ["spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"]
    );
}

#[test]
fn node_ports_are_given_from_the_range_once_each() {
    let net = ServiceNetwork::default();
    let mut held = Held::default();
    let mut s = service(json!({"type": "NodePort", "ports": [
        {"name": "http", "port": 80}, {"name": "https", "port": 443, "nodePort": 30443},
    ]}));
    net.assign(None, &mut s, &held).unwrap();
    let first = s["spec"]["ports"][0]["nodePort"].as_u64().unwrap() as u16;
    assert!(NODE_PORTS.contains(&first) && first != 30443);
    assert_eq!(s["spec"]["ports"][1]["nodePort"], json!(30443));
    held.add(&s);

    let mut taken =
        service(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30443}]}));
    assert_eq!(
        messages(net.assign(None, &mut taken, &held).unwrap_err()),
        ["spec.ports[0].nodePort: Invalid value: 30443: provided port is already allocated"]
    );
    let mut low = service(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 8080}]}));
    assert_eq!(
        messages(net.assign(None, &mut low, &held).unwrap_err()),
        ["spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. \
          The range of valid ports is 30000-32767"]
    );
    // Its own ports stay its own on update; a LoadBalancer that allocates none gets none.
    let old = s.clone();
    net.assign(Some(&old), &mut s, &held).unwrap();
    let mut lb = service(json!({"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
        "ports": [{"port": 80}]}));
    net.assign(None, &mut lb, &held).unwrap();
    assert!(lb["spec"]["ports"][0].get("nodePort").is_none());
}

#[test]
fn a_small_network_fills_up_and_says_so() {
    let net = ServiceNetwork::new("192.168.7.0/29", 30000..=30001).unwrap();
    assert_eq!(net.first(), Ipv4Addr::new(192, 168, 7, 1));
    let mut held = Held::default();
    for _ in 0..6 {
        let mut s = service(json!({"ports": [{"port": 80}]}));
        net.assign(None, &mut s, &held).unwrap();
        held.add(&s);
    }
    assert_eq!(held.ips.len(), 6);
    let mut full = service(json!({"ports": [{"port": 80}]}));
    assert_eq!(
        messages(net.assign(None, &mut full, &held).unwrap_err()),
        ["spec.clusterIPs: Invalid value: []string(nil): failed to allocate a serviceIP: range is \
          full"]
    );
    assert!(ServiceNetwork::new("10.0.0.0", NODE_PORTS).is_err());
    assert!(ServiceNetwork::new("10.0.0.0/31", NODE_PORTS).is_err());
}

#[test]
fn a_type_change_drops_what_only_the_old_type_needed() {
    let old = service(json!({"type": "NodePort", "clusterIP": "10.96.3.4",
        "clusterIPs": ["10.96.3.4"], "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
        "externalTrafficPolicy": "Cluster", "ports": [{"port": 80, "nodePort": 30080}]}));
    let mut to_cluster_ip = old.clone();
    to_cluster_ip["spec"]["type"] = json!("ClusterIP");
    drop_type_dependent(&old, &mut to_cluster_ip);
    assert!(to_cluster_ip["spec"]["ports"][0].get("nodePort").is_none());
    assert!(to_cluster_ip["spec"].get("externalTrafficPolicy").is_none());
    assert_eq!(to_cluster_ip["spec"]["clusterIP"], json!("10.96.3.4"));

    let mut to_external = old.clone();
    to_external["spec"]["type"] = json!("ExternalName");
    to_external["spec"]["externalName"] = json!("db.example.com");
    drop_type_dependent(&old, &mut to_external);
    for key in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        assert!(to_external["spec"].get(key).is_none(), "{key} kept");
    }

    // A port the client changed is the client's to keep (and validation's to judge).
    let mut moved = old.clone();
    moved["spec"]["type"] = json!("ClusterIP");
    moved["spec"]["ports"][0]["nodePort"] = json!(30081);
    drop_type_dependent(&old, &mut moved);
    assert_eq!(moved["spec"]["ports"][0]["nodePort"], json!(30081));
}

#[test]
fn what_others_hold_is_read_only_when_it_is_looked_at() {
    let net = ServiceNetwork::default();
    // Everything the network has, held by others: any look at it shows.
    let mut full = Held::default();
    for ip in ["10.96.0.10", "10.96.0.20", "10.100.0.1"] {
        full.ips.insert(ip.parse().unwrap());
    }
    full.node_ports.extend(30000..=32767);
    let stored = |spec: Value| {
        let mut s = service(spec);
        net.assign(None, &mut s, &Held::default()).unwrap();
        s
    };
    let web = stored(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}));
    let np = stored(json!({"type": "NodePort", "clusterIP": "10.96.0.20",
        "ports": [{"port": 80, "nodePort": 30080}]}));
    // Writes that keep what they hold: no look, and the same outcome with nothing held as with
    // everything held by others.
    let mut relabelled = web.clone();
    relabelled["metadata"]["labels"] = json!({"tier": "front"});
    let mut np_again = np.clone();
    np_again["spec"]["ports"][0]["port"] = json!(8080);
    let headless = service(json!({"clusterIP": "None", "ports": [{"port": 80}]}));
    let external = service(json!({"type": "ExternalName", "externalName": "db.example"}));
    for (old, new) in
        [(Some(&web), &relabelled), (Some(&np), &np_again), (None, &headless), (None, &external)]
    {
        assert!(!net.needs_held(old, new), "{new}");
        let (mut a, mut b) = (new.clone(), new.clone());
        let with_none = net.assign(old, &mut a, &Held::default()).map(|_| a);
        let with_all = net.assign(old, &mut b, &full).map(|_| b);
        assert_eq!(with_none.map_err(messages), with_all.map_err(messages), "{new}");
    }
    // Writes that ask for or need a value look.
    let mut moved = web.clone();
    moved["spec"]["clusterIP"] = json!("10.100.0.1");
    moved["spec"]["clusterIPs"] = json!(["10.100.0.1"]);
    let mut new_port = np.clone();
    new_port["spec"]["ports"][0]["nodePort"] = json!(30081);
    let mut to_node_port = web.clone();
    to_node_port["spec"]["type"] = json!("NodePort");
    for (old, new) in [
        (None, &service(json!({"ports": [{"port": 80}]}))),
        (None, &service(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}))),
        (Some(&web), &moved),
        (Some(&np), &new_port),
        (Some(&web), &to_node_port),
    ] {
        assert!(net.needs_held(old, new), "{new}");
    }
}
