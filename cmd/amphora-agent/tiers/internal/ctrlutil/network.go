package ctrlutil

// NetCall is what controller_network.py records per driver call.
type NetCall struct {
	Returned any     `json:"returned"`
	Raised   *string `json:"raised"`
	Error    string  `json:"error"`
	Seconds  float64 `json:"seconds"`
}
