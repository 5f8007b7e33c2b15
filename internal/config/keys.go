package config

// The keys of a config, as their structs decode them (val). A new key is a
// field here and its check in Parse. Field order is the order decoding
// visits the keys and "did you mean" suggests from.

// netconfKeys is the top level of a CNI network config; its other keys
// belong to the runtime and to other plugins.
type netconfKeys struct {
	CNIVersion    val[string]        `json:"cniVersion"`
	Name          val[string]        `json:"name"`
	RuntimeConfig val[runtimeConfig] `json:"runtimeConfig"`
	IPAM          val[objectMembers] `json:"ipam"`
}

func (netconfKeys) open() {}

// runtimeConfig is what the runtime passes beside the config; its other
// keys belong to other plugins.
type runtimeConfig struct {
	IPs val[[]val[string]] `json:"ips"`
}

func (runtimeConfig) open() {}

// ipamKeys are the ipam keys tenure acts on, in the ipam section or the
// flat file, in the order Parse checks them, so the first fault decoding
// meets is the first a check would (suggestions come from allKeys, sorted).
type ipamKeys struct {
	Type                    val[string]           `json:"type"`
	Pool                    val[string]           `json:"pool"`
	Pools                   val[[]val[string]]    `json:"pools"`
	Exclude                 val[[]val[string]]    `json:"exclude"`
	Range                   val[string]           `json:"range"`
	RangeStart              val[string]           `json:"range_start"`
	RangeEnd                val[string]           `json:"range_end"`
	IPRanges                val[[]val[rangeKeys]] `json:"ipRanges"`
	Gateway                 val[string]           `json:"gateway"`
	Routes                  val[[]val[routeKeys]] `json:"routes"`
	DNS                     val[dnsKeys]          `json:"dns"`
	NetworkName             val[string]           `json:"network_name"`
	EnableOverlappingRanges val[bool]             `json:"enable_overlapping_ranges"`
	AgentSocket             val[string]           `json:"agent_socket"`
	ConfigurationPath       val[string]           `json:"configuration_path"`
	StickyStatefulSets      val[bool]             `json:"sticky_statefulsets"`
	PrefixDelegation        val[pdKeys]           `json:"prefix_delegation"`
	DHCPv6                  val[dhcpv6Keys]       `json:"dhcpv6"`
	Probe                   val[bool]             `json:"probe"`
	ProbeInterface          val[string]           `json:"probe_interface"`
}

func (ipamKeys) open() {} // with whereaboutsKeys: checkKnownKeys

// whereaboutsKeys are the keys whereabouts v0.9 accepts (pkg/types/types.go,
// IPAMConfig and the alias its UnmarshalJSON decodes into) that mean nothing
// to tenure, with the JSON type whereabouts decodes them as: a value
// whereabouts would have refused is refused here too.
type whereaboutsKeys struct {
	Name                     val[string]         `json:"name"` // whereabouts overwrites it with the network name
	Datastore                val[string]         `json:"datastore"`
	Kubernetes               val[kubernetesKeys] `json:"kubernetes"`
	EtcdHost                 val[string]         `json:"etcd_host"`
	EtcdUsername             val[string]         `json:"etcd_username"`
	EtcdPassword             val[string]         `json:"etcd_password"`
	EtcdKeyFile              val[string]         `json:"etcd_key_file"`
	EtcdCertFile             val[string]         `json:"etcd_cert_file"`
	EtcdCACertFile           val[string]         `json:"etcd_ca_cert_file"`
	LogFile                  val[string]         `json:"log_file"`
	LogLevel                 val[string]         `json:"log_level"`
	ReconcilerCronExpression val[string]         `json:"reconciler_cron_expression"`
	SleepForRace             val[number]         `json:"sleep_for_race"`
	LeaderLeaseDuration      val[number]         `json:"leader_lease_duration"`
	LeaderRenewDeadline      val[number]         `json:"leader_renew_deadline"`
	LeaderRetryPeriod        val[number]         `json:"leader_retry_period"`
	NodeSliceSize            val[string]         `json:"node_slice_size"`
	Addresses                val[[]val[object]]  `json:"addresses"` // static addresses; whereabouts never puts them in results
}

func (whereaboutsKeys) open() {}

type kubernetesKeys struct {
	Kubeconfig val[string] `json:"kubeconfig"`
	K8sAPIRoot val[string] `json:"k8s_api_root"`
}

func (kubernetesKeys) open() {}

// object is any JSON object.
type object struct{}

func (object) open() {}

// rangeKeys is an ipRanges entry.
type rangeKeys struct {
	Range      val[string]        `json:"range"`
	RangeStart val[string]        `json:"range_start"`
	RangeEnd   val[string]        `json:"range_end"`
	Exclude    val[[]val[string]] `json:"exclude"`
}

type routeKeys struct {
	Dst      val[string] `json:"dst"`
	GW       val[string] `json:"gw"`
	MTU      val[int64]  `json:"mtu"`
	AdvMSS   val[int64]  `json:"advmss"`
	Priority val[int64]  `json:"priority"`
	Table    val[int64]  `json:"table"`
	Scope    val[int64]  `json:"scope"`
}

type dnsKeys struct {
	Nameservers val[[]val[string]] `json:"nameservers"`
	Domain      val[string]        `json:"domain"`
	Search      val[[]string]      `json:"search"`
	Options     val[[]string]      `json:"options"`
}

type pdKeys struct {
	Range        val[string] `json:"range"`
	PrefixLength val[int64]  `json:"prefix_length"`
}

type dhcpv6Keys struct {
	Enabled              val[bool]             `json:"enabled"`
	Interfaces           val[[]val[string]]    `json:"interfaces"`
	PreferredLifetime    val[int64]            `json:"preferred_lifetime"`
	ValidLifetime        val[int64]            `json:"valid_lifetime"`
	InstallRoutes        val[bool]             `json:"install_routes"`
	RouterAdvertisements val[bool]             `json:"router_advertisements"`
	TrustedRelays        val[[]val[relayKeys]] `json:"trusted_relays"`
}

type relayKeys struct {
	Interface val[string] `json:"interface"`
	MAC       val[string] `json:"mac"`
	Address   val[string] `json:"address"`
}
