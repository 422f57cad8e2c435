import csv   
import sys
	

def main(path):  
    total = 0	
    with open(path, newline='') as fh:
        for row in csv.DictReader(fh):   
            total += float(row['amount'])
    print(f'{total:.2f}')  	 


if __name__ == '__main__':    
    main(sys.argv[1])
